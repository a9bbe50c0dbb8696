"""A stand-in for ORO's public API on loopback, for tests and for trying the oro_api source.

Every JSON answer is built from oro-sdk's own model classes (`to_dict`), so its shapes are
the SDK's; artifacts live in an S3 bucket (moto's server in tests) and are handed out as
presigned URLs, as ORO does. Faults are planned per path: a status (429 with Retry-After,
5xx) for the next n requests, an artifact download cut short once, an artifact not released,
an artifact not found, a bearer token required.

Run by hand (moto must be installed):
    python tests/oro_standin.py [--conformance ../shared/conformance]
prints the base URL, the day it serves, and blocks.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import urllib.parse
import urllib.request
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from oro_sdk.models import (
    AgentVersionNotFoundError,
    AgentVersionProblemsResponse,
    AgentVersionPublic,
    ArtifactDownloadResponse,
    ArtifactNotFoundError,
    ArtifactNotReleasedError,
    LeaderboardEntry,
    LeaderboardResponse,
    ProblemProgressEntry,
    ProblemPublic,
    ProblemPublicMetadata,
    ProblemStatus,
    RaceDetailResponse,
    RaceHistoryResponse,
    RaceNotFoundError,
    RacePublic,
    RaceQualifierPublic,
    RateLimitExceededError,
    SuitePublic,
    SuiteWithProblemsResponse,
    ValidatorProblemResult,
)

_NS = uuid.UUID("0a0e0000-0000-4000-8000-00000000a0e0")
BUCKET = "oro-artifacts"


def _time(text: str) -> dt.datetime:
    when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


@dataclass
class Run:
    """One validator result of one problem, and its EVAL_PROBLEM_LOGS bytes."""

    agent_version_id: str
    problem_id: str
    eval_run_id: str
    validator_hotkey: str
    status: str
    score: float | None
    reasoning_score: float | None
    updated_at: str
    inference_total: int | None = None
    inference_failure_count: int | None = None
    execution_time: float | None = None
    category: str | None = None
    phase: str = "QUALIFYING"
    race_id: str | None = None
    logs: bytes = b"[]"

    def result(self) -> ValidatorProblemResult:
        return ValidatorProblemResult(
            eval_run_id=uuid.UUID(self.eval_run_id), validator_hotkey=self.validator_hotkey,
            status=ProblemStatus(self.status), score=self.score, reasoning_score=self.reasoning_score,
            updated_at=_time(self.updated_at), inference_total=self.inference_total,
            inference_failure_count=self.inference_failure_count, execution_time=self.execution_time)


@dataclass
class World:
    """What the stand-in serves; tests change it between ingests (re-judge, release, ...)."""

    runs: list[Run] = field(default_factory=list)
    miners: dict[str, str] = field(default_factory=dict)  # agent_version_id -> miner hotkey
    problems: dict[str, dict] = field(default_factory=dict)  # problem_id -> suite metadata
    suite_id: int = 3
    race_qualifiers: set[str] = field(default_factory=set)  # agent versions in the day's race
    races_before: int = 3  # older races (ended days earlier) listed in the history too
    day: str = "2026-11-20"
    # faults
    token: str | None = None
    planned: dict[str, list[tuple[int, dict]]] = field(default_factory=lambda: defaultdict(list))
    truncate_once: set[str] = field(default_factory=set)  # eval_run_id/problem_id
    not_released: set[str] = field(default_factory=set)
    not_found: set[str] = field(default_factory=set)
    requests: list[tuple[str, str]] = field(default_factory=list)

    def plan(self, path: str, status: int, times: int = 1, headers: dict | None = None) -> None:
        """The next `times` requests to `path` get `status` (with `headers`)."""
        self.planned[path] += [(status, headers or {})] * times

    def find(self, eval_run_id: str, problem_id: str) -> Run:
        return next(r for r in self.runs if r.eval_run_id == eval_run_id and r.problem_id == problem_id)

    def calls(self, method: str, prefix: str) -> int:
        return sum(1 for m, p in self.requests if m == method and p.startswith(prefix))


def day_race_id(day: str) -> uuid.UUID:
    return uuid.uuid5(_NS, f"race-{day}")


def world_from_problem_runs(records: list[dict], day: str, logs: list[bytes] | None = None) -> World:
    """A world serving these joined records split back into what the API holds: the entry,
    the agent version, the suite problem and the artifact (`logs[i]`, or the record's dialogue)."""
    world = World(day=day)
    for i, rec in enumerate(records):
        world.miners[rec["agent_version_id"]] = rec["miner_hotkey"]
        world.problems.setdefault(rec["problem_id"], rec.get("problem") or {})
        dialogue = logs[i] if logs is not None else json.dumps(rec.get("dialogue") or []).encode()
        world.runs.append(Run(
            agent_version_id=rec["agent_version_id"], problem_id=rec["problem_id"], eval_run_id=rec["eval_run_id"],
            validator_hotkey=rec["validator_hotkey"], status=rec["status"], score=rec.get("score"),
            reasoning_score=rec.get("reasoning_score"), updated_at=rec["updated_at"],
            inference_total=rec.get("inference_total"), inference_failure_count=rec.get("inference_failure_count"),
            execution_time=rec.get("execution_time"), category=(rec.get("problem") or {}).get("category"),
            phase=rec.get("phase") or "QUALIFYING", logs=dialogue,
            race_id=str(day_race_id(day)) if rec.get("phase") == "RACE" else None))
    # Half the agent versions race that day; the other half are found through the leaderboard only.
    versions = sorted(world.miners)
    world.race_qualifiers = set(versions[::2])
    return world


class StandIn:
    """The HTTP server (a thread) plus the S3 client holding the artifacts."""

    def __init__(self, world: World, s3_endpoint: str) -> None:
        import logging

        import boto3

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's request log
        self.world = world
        self.s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
        self.s3.create_bucket(Bucket=BUCKET)
        self._lock = threading.Lock()
        self._cut: set[str] = set()
        handler = type("Handler", (_Handler,), {"standin": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ---- the API's answers, all from SDK models ----

    def _day_start(self) -> dt.datetime:
        return dt.datetime.fromisoformat(self.world.day).replace(tzinfo=dt.timezone.utc)

    def races(self) -> list[RacePublic]:
        start = self._day_start()
        races = [RacePublic(race_id=day_race_id(self.world.day), suite_id=self.world.suite_id,
                            status="COMPLETED", race_number=100, created_at=start + dt.timedelta(hours=1),
                            race_started_at=start + dt.timedelta(hours=2),
                            race_completed_at=start + dt.timedelta(hours=20),
                            qualifier_count=len(self.world.race_qualifiers))]
        for n in range(1, self.world.races_before + 1):  # most recent first, as the API lists them
            begun = start - dt.timedelta(days=3 * n)
            races.append(RacePublic(race_id=uuid.uuid5(_NS, f"race-old-{n}"), suite_id=self.world.suite_id,
                                    status="COMPLETED", race_number=100 - n, created_at=begun,
                                    race_started_at=begun, race_completed_at=begun + dt.timedelta(hours=20)))
        return races

    def race_detail(self, race_id: str) -> tuple[int, dict]:
        for race in self.races():
            if str(race.race_id) == race_id:
                versions = self.world.race_qualifiers if race.race_number == 100 else set()
                qualifiers = [RaceQualifierPublic(agent_version_id=uuid.UUID(v), qualification_type="SCORED",
                                                  miner_hotkey=self.world.miners[v]) for v in sorted(versions)]
                return 200, RaceDetailResponse(race=race, qualifiers=qualifiers).to_dict()
        return 404, RaceNotFoundError(detail=f"race {race_id} not found").to_dict()

    def leaderboard(self) -> list[LeaderboardEntry]:
        return [LeaderboardEntry(rank=i + 1, agent_version_id=uuid.UUID(v), agent_name=f"agent-{v[:8]}",
                                 miner_hotkey=self.world.miners[v], version_number=1, final_score=0.5)
                for i, v in enumerate(sorted(set(self.world.miners) - self.world.race_qualifiers))]

    def agent_version(self, version: str) -> AgentVersionPublic:
        when = self._day_start() - dt.timedelta(days=1)
        return AgentVersionPublic(agent_version_id=uuid.UUID(version), agent_id=uuid.uuid5(_NS, version),
                                  agent_name=f"agent-{version[:8]}", miner_hotkey=self.world.miners[version],
                                  version_number=1, submitted_at=when, released_at=when, code_available_at=when,
                                  suite_id=self.world.suite_id)

    def problems_of(self, version: str) -> AgentVersionProblemsResponse:
        # One entry per problem and phase (and race), as the API lists them.
        by_entry: dict[tuple, list[Run]] = defaultdict(list)
        for run in self.world.runs:
            if run.agent_version_id == version:
                by_entry[(run.problem_id, run.phase, run.race_id or "")].append(run)
        entries = [ProblemProgressEntry(problem_id=uuid.UUID(p), category=runs[0].category, phase=phase,
                                        race_id=uuid.UUID(race) if race else None,
                                        validator_results=[r.result() for r in runs])
                   for (p, phase, race), runs in sorted(by_entry.items())]
        return AgentVersionProblemsResponse(agent_version_id=uuid.UUID(version), problems=entries,
                                            suite_id=self.world.suite_id)

    def suite(self, suite_id: int) -> SuiteWithProblemsResponse:
        problems = []
        for problem_id, meta in sorted(self.world.problems.items()):
            metadata = ProblemPublicMetadata()
            metadata.additional_properties = dict(meta)
            problems.append(ProblemPublic(problem_id=uuid.UUID(problem_id), suite_id=suite_id, metadata=metadata))
        return SuiteWithProblemsResponse(suite=SuitePublic(suite_id=suite_id, suite_version=suite_id, is_active=True),
                                         problems=problems)

    def download_url(self, body: dict) -> tuple[int, dict]:
        key = f"{body.get('eval_run_id')}/{body.get('problem_id')}"
        if key in self.world.not_released:
            return 404, ArtifactNotReleasedError(detail="problem logs are not released yet").to_dict()
        try:
            run = self.world.find(body.get("eval_run_id"), body.get("problem_id"))
        except StopIteration:
            run = None
        if run is None or key in self.world.not_found:
            return 404, ArtifactNotFoundError(detail=f"no EVAL_PROBLEM_LOGS for {key}").to_dict()
        object_key = f"logs/{run.agent_version_id}/{key}/{run.updated_at}.json"
        self.s3.put_object(Bucket=BUCKET, Key=object_key, Body=run.logs)
        url = self.s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": object_key},
                                             ExpiresIn=600)
        if key in self.world.truncate_once:  # through the stand-in, which cuts the first GET short
            url = f"{self.url}/cut-short?key={urllib.parse.quote(key)}&target={urllib.parse.quote(url, safe='')}"
        expires = dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=10)
        return 200, ArtifactDownloadResponse(download_url=url, expires_at=expires).to_dict()

    def answer(self, method: str, path: str, query: dict, body: dict | None) -> tuple[int, dict | list, dict]:
        world = self.world
        with self._lock:
            world.requests.append((method, path))
            planned = world.planned.get(path)
            fault = planned.pop(0) if planned else None
        if fault is not None:
            status, headers = fault
            detail = RateLimitExceededError(detail="slow down").to_dict() if status == 429 else {"detail": "oops"}
            return status, detail, headers
        page = lambda items: (items[int(query.get("offset", 0)): int(query.get("offset", 0)) + int(query.get("limit", 20))])
        parts = path.strip("/").split("/")
        if path == "/v1/public/races/history":
            races = self.races()
            return 200, RaceHistoryResponse(total=len(races), limit=int(query.get("limit", 20)),
                                            offset=int(query.get("offset", 0)), races=page(races)).to_dict(), {}
        if path == "/v1/public/leaderboard":
            entries = self.leaderboard()
            suite = SuitePublic(suite_id=world.suite_id, suite_version=world.suite_id, is_active=True)
            return 200, LeaderboardResponse(total=len(entries), limit=int(query.get("limit", 100)),
                                            offset=int(query.get("offset", 0)), suite=suite, entries=page(entries),
                                            unique_miners=len(set(world.miners.values()))).to_dict(), {}
        if parts[:3] == ["v1", "public", "races"] and len(parts) == 4:
            status, payload = self.race_detail(parts[3])
            return status, payload, {}
        if parts[:3] == ["v1", "public", "agent-versions"] and len(parts) in (4, 5):
            if parts[3] not in world.miners:
                return 404, AgentVersionNotFoundError(detail=f"agent version {parts[3]} not found").to_dict(), {}
            if len(parts) == 4:
                return 200, self.agent_version(parts[3]).to_dict(), {}
            if parts[4] == "problems":
                return 200, self.problems_of(parts[3]).to_dict(), {}
        if parts[:3] == ["v1", "public", "suites"] and len(parts) == 5 and parts[4] == "problems":
            return 200, self.suite(int(parts[3])).to_dict(), {}
        if path == "/v1/public/artifacts/download-url" and method == "POST":
            status, payload = self.download_url(body or {})
            return status, payload, {}
        return 404, {"detail": f"no route {method} {path}"}, {}


class _Handler(BaseHTTPRequestHandler):
    standin: StandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, payload: Any, headers: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_bytes(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method: str) -> None:
        parsed = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(parsed.query))
        if parsed.path == "/cut-short":
            return self._cut_short(query["key"], query["target"])
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        token = self.standin.world.token
        if token and self.headers.get("Authorization") != f"Bearer {token}":
            return self._send(401, {"detail": "missing or invalid credentials"}, {})
        status, payload, headers = self.standin.answer(method, parsed.path, query, body)
        self._send(status, payload, headers)

    def _cut_short(self, key: str, target: str) -> None:
        """The presigned object; the first time, the connection drops halfway through the body."""
        with urllib.request.urlopen(target) as upstream:
            data = upstream.read()
        with self.standin._lock:
            first = key not in self.standin._cut
            self.standin._cut.add(key)
        if not first:
            return self._send_bytes(data)
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.close_connection = True

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")


def conformance_world(conformance: Path) -> World:
    """The conformance pair: oro_upload.jsonl (the artifacts, byte for byte) + its API entries;
    the problem text from the suite (the joined records' `problem`)."""
    records = conformance / "records"
    uploads = [line for line in (records / "oro_upload.jsonl").read_bytes().split(b"\n") if line.strip()]
    metas = [json.loads(line) for line in (records / "oro_upload_api_meta.jsonl").read_text().split("\n") if line.strip()]
    suite = {}
    for line in (records / "oro_problem_run.jsonl").read_text().split("\n"):
        if line.strip():
            rec = json.loads(line)
            suite[rec["problem_id"]] = rec["problem"]
    joined = []
    for meta in metas:
        entry, result = meta["entry"], meta["entry"]["validator_results"][0]
        joined.append({**result, "agent_version_id": meta["agent_version_id"], "miner_hotkey": meta["miner_hotkey"],
                       "problem_id": entry["problem_id"], "phase": entry["phase"],
                       "problem": suite.get(entry["problem_id"], {"category": entry["category"]})})
    day = min(r["updated_at"] for r in joined)[:10]
    return world_from_problem_runs(joined, day, logs=uploads)


def synthetic_world(day: str = "2026-11-20", traces: int = 30) -> World:
    """A simulated day (the project's simulator), for where ../shared is absent."""
    import gzip
    import tempfile

    from shopdistill_assets.sim import simulate
    from shopdistill_assets.sim.arena import ArenaConfig

    out = Path(tempfile.mkdtemp(prefix="oro-standin-"))
    simulate(ArenaConfig(out=out, start_day=dt.date.fromisoformat(day), days=1, traces_per_day=traces,
                         n_products=300, problems_per_day=20, corrupt_share=0, reupload_share=0,
                         other_dialect_share=0, truncated_file=False, seed=3))
    data = gzip.decompress((out / "firehose" / f"day={day}" / "part-000.jsonl.gz").read_bytes())
    return world_from_problem_runs([json.loads(line) for line in data.splitlines()], day)


def main() -> None:  # pragma: no cover - a manual tool
    import argparse
    import os

    from moto.server import ThreadedMotoServer

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conformance", default=str(Path(__file__).resolve().parents[2] / "shared" / "conformance"),
                        help="conformance folder (default ../shared/conformance); a simulated day where absent")
    args = parser.parse_args()
    for var, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                       ("AWS_DEFAULT_REGION", "us-east-1")):
        os.environ.setdefault(var, value)
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    conformance = Path(args.conformance)
    world = conformance_world(conformance) if (conformance / "records").is_dir() else synthetic_world()
    with StandIn(world, f"http://{host}:{port}") as standin:
        print(f"ORO stand-in at {standin.url} serving day {world.day} ({len(world.runs)} problem runs)", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
