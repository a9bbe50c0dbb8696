"""One UTC day of SN15 problem runs from ORO's public API: enumerate, land, join.

Plain Python, no Dagster (the asset is `ingest/oro_assets.py`). How a day is found (docs/oro-api.md):

1. agent versions: the qualifiers of every race whose span touches the day (race history,
   paged, then race detail), plus every agent version on the leaderboard (paged), which covers
   qualifying runs outside races;
2. per agent version: `GET /v1/public/agent-versions/{id}` (miner hotkey, suite) and
   `.../problems` (per problem, one `validator_results` entry per validator run); a result
   belongs to the UTC day of its `updated_at`;
3. per result of the day: `POST /v1/public/artifacts/download-url` for its EVAL_PROBLEM_LOGS,
   then the presigned GET; the suite's problems (`GET /v1/public/suites/{id}/problems`) give
   the problem text.

Landing (the raw zone, beside the firehose day folders, never read as a day file):
`<landing>/day=D/runs/<eval_run_id>/<problem_id>/<updated_us>.json` holds the artifact byte
for byte, `<updated_us>.meta.json` the API entry, the agent version's identity, the problem,
and the artifact's size and sha256; the meta is written last, so it marks a landed version.
A version is (eval_run_id, problem_id, updated_at): a re-judged result is a new version and
the older one stays, so the day file carries both and the corpus's "latest upload wins" marks
the older `superseded`. A re-run fetches only versions without a meta (or whose artifact no
longer matches its sha256, or was missing).

The day file `<firehose>/day=D/oro-api.jsonl` is rebuilt from every landed version of the day,
one joined `sn15.problem_run/v1` line each, and replaced whole, only when every result of the
day has landed: an artifact not released yet makes the day incomplete (`DayIncomplete`), with
the file left as it was.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson
from oro_sdk.api.public import (
    get_agent_version,
    get_agent_version_problems,
    get_artifact_download_url,
    get_leaderboard,
    get_race_detail,
    get_race_history,
    get_suite_problems,
)
from oro_sdk.models import ArtifactDownloadRequest, ArtifactType
from oro_sdk.types import Unset

from resources.oro_client import (
    ArtifactNotReleased,
    IngestConfig,
    OroApi,
    OroNotFound,
    fetch_bytes,
    sha256_hex,
)
from shopdistill_assets.core.formats import PRIMARY
from shopdistill_assets.core.recency import updated_at_us
from shopdistill_assets.ingest.oro_store import Store

DAY_FILE = "oro-api.jsonl"
MANIFEST = "manifest.json"
UNFINISHED = frozenset({"PENDING", "RUNNING"})  # not a result yet: its updated_at will move
MAX_PAGES = 1000  # a guard on paging, far above a real history


class DayIncomplete(RuntimeError):
    """Some results of the day have artifacts that are not released yet."""


@dataclass(frozen=True)
class DayResult:
    """One validator result of the day, with what the join needs from its neighbours."""

    entry: dict  # ProblemProgressEntry.to_dict() without validator_results
    result: dict  # ValidatorProblemResult.to_dict()
    agent_version: dict  # agent_version_id, miner_hotkey, suite_id

    @property
    def eval_run_id(self) -> str:
        return self.result["eval_run_id"]

    @property
    def problem_id(self) -> str:
        return self.entry["problem_id"]

    @property
    def version_key(self) -> str:
        return f"{self.eval_run_id}/{self.problem_id}/{updated_at_us(self.result['updated_at'])}"


@dataclass
class DayLanding:
    day: str
    counts: Counter = field(default_factory=Counter)
    not_released: list[str] = field(default_factory=list)
    day_file: str | None = None
    day_file_sha256: str | None = None
    day_file_written: bool = False


def _set(value: Any) -> Any:
    return None if isinstance(value, Unset) else value


def day_bounds(day: str) -> tuple[dt.datetime, dt.datetime]:
    start = dt.datetime.combine(dt.date.fromisoformat(day), dt.time(), tzinfo=dt.timezone.utc)
    return start, start + dt.timedelta(days=1)


def utc_day(when: dt.datetime | None) -> str | None:
    if when is None:
        return None
    if when.tzinfo is None:  # the API writes UTC; a naive time is read as UTC
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.astimezone(dt.timezone.utc).date().isoformat()


# ---- 1. agent versions of the day --------------------------------------------------------

def _pages(fetch: Callable[[int], Any], items_of: Callable[[Any], list]) -> Iterable[list]:
    offset = 0
    for _ in range(MAX_PAGES):
        page = fetch(offset)
        items = items_of(page)
        if not items:
            return
        yield items
        offset += len(items)
        if offset >= page.total:
            return


def _race_touches(race: Any, start: dt.datetime, end: dt.datetime) -> bool:
    began = [t for t in (_set(race.created_at), _set(race.race_started_at)) if t is not None]
    ended = _set(race.race_completed_at)
    return (not began or min(began) < end) and (ended is None or ended >= start)


def race_agent_versions(api: OroApi, day: str, cfg: IngestConfig) -> set[str]:
    start, end = day_bounds(day)
    start -= dt.timedelta(days=cfg.race_lookback_days)
    fetch = lambda offset: api.call(f"GET /v1/public/races/history?offset={offset}", get_race_history,
                                    limit=cfg.page_size, offset=offset)
    versions: set[str] = set()
    for races in _pages(fetch, lambda page: page.races):
        api.stats.add("races/listed", len(races))
        for race in races:
            if not _race_touches(race, start, end):
                continue
            api.stats.add("races/of_day")
            detail = api.call(f"GET /v1/public/races/{race.race_id}", get_race_detail, race_id=race.race_id)
            versions.update(str(q.agent_version_id) for q in _set(detail.qualifiers) or [])
        # Most recent first: once a whole page ended before the window, older pages did too.
        if all((_set(r.race_completed_at) or end) < start for r in races):
            break
    return versions


def leaderboard_agent_versions(api: OroApi, cfg: IngestConfig) -> set[str]:
    fetch = lambda offset: api.call(f"GET /v1/public/leaderboard?offset={offset}", get_leaderboard,
                                    limit=cfg.page_size, offset=offset)
    return {str(e.agent_version_id) for entries in _pages(fetch, lambda page: page.entries) for e in entries}


# ---- 2. results of the day ------------------------------------------------------------

def agent_version_results(api: OroApi, agent_version_id: str, day: str) -> tuple[list[DayResult], Counter]:
    counts: Counter = Counter()
    try:
        version = api.call(f"GET /v1/public/agent-versions/{agent_version_id}", get_agent_version,
                           agent_version_id=agent_version_id)
        progress = api.call(f"GET /v1/public/agent-versions/{agent_version_id}/problems",
                            get_agent_version_problems, agent_version_id=agent_version_id)
    except OroNotFound:
        counts["agent_versions/not_found"] += 1
        return [], counts
    suite_id = _set(progress.suite_id) or _set(version.suite_id)
    identity = {"agent_version_id": str(version.agent_version_id), "miner_hotkey": version.miner_hotkey,
                "suite_id": suite_id}
    results = []
    for entry in progress.problems:
        entry_dict = {k: v for k, v in entry.to_dict().items() if k != "validator_results"}
        for result in _set(entry.validator_results) or []:
            when = utc_day(_set(result.updated_at))
            if when is None:
                counts["results/no_updated_at"] += 1
            elif when != day:
                counts["results/other_day"] += 1
            elif str(result.status) in UNFINISHED:
                counts["results/unfinished"] += 1
            else:
                results.append(DayResult(entry_dict, result.to_dict(), identity))
    return results, counts


def day_results(api: OroApi, day: str, cfg: IngestConfig, pool: ThreadPoolExecutor) -> tuple[list[DayResult], Counter]:
    versions = sorted(race_agent_versions(api, day, cfg) | leaderboard_agent_versions(api, cfg))
    counts: Counter = Counter({"agent_versions": len(versions)})
    results: list[DayResult] = []
    for found, seen in pool.map(lambda v: agent_version_results(api, v, day), versions):
        results += found
        counts.update(seen)
    counts["results/of_day"] = len(results)
    return results, counts


def suite_problems(api: OroApi, suite_id: int) -> dict[str, dict]:
    suite = api.call(f"GET /v1/public/suites/{suite_id}/problems", get_suite_problems, suite_id=suite_id)
    return {str(p.problem_id): dict(p.metadata.additional_properties) for p in suite.problems
            if not isinstance(p.metadata, Unset)}


# ---- 3. landing ---------------------------------------------------------------------

def _runs_prefix(day: str) -> str:
    return f"day={day}/runs"


def _landed(landing: Store, key: str) -> bool:
    """A version is landed when its meta is there and its artifact still has that sha256."""
    raw = landing.read(key + ".meta.json")
    if raw is None:
        return False
    artifact = json.loads(raw).get("artifact")
    if artifact is None:  # the API had no artifact last time: ask again
        return False
    data = landing.read(key + ".json")
    return data is not None and sha256_hex(data) == artifact["sha256"]


def land_result(api: OroApi, landing: Store, day: str, found: DayResult, problem: dict | None) -> str:
    """Fetch one result's EVAL_PROBLEM_LOGS into the landing zone; its outcome as a count key."""
    key = f"{_runs_prefix(day)}/{found.version_key}"
    if _landed(landing, key):
        return "artifacts/already_landed"
    what = f"EVAL_PROBLEM_LOGS of eval run {found.eval_run_id} problem {found.problem_id}"
    request = ArtifactDownloadRequest(artifact_type=ArtifactType.EVAL_PROBLEM_LOGS,
                                      agent_version_id=found.agent_version["agent_version_id"],
                                      eval_run_id=found.eval_run_id, problem_id=found.problem_id)
    artifact, outcome = None, "artifacts/fetched"
    try:
        presigned = api.call(f"POST /v1/public/artifacts/download-url ({what})", get_artifact_download_url,
                             body=request)
        data = fetch_bytes(api, what, presigned.download_url)
    except OroNotFound:
        outcome = "artifacts/not_found"  # the line still goes out, with no dialogue: the ledger says why
    else:
        landing.write(key + ".json", data)
        artifact = {"key": key + ".json", "size_bytes": len(data), "sha256": sha256_hex(data),
                    "artifact_type": ArtifactType.EVAL_PROBLEM_LOGS.value}
    meta = {"day": day, "entry": found.entry, "result": found.result, "agent_version": found.agent_version,
            "problem": problem, "artifact": artifact,
            "landed_at": dt.datetime.now(dt.timezone.utc).isoformat()}
    landing.write(key + ".meta.json", orjson.dumps(meta, option=orjson.OPT_INDENT_2))
    return outcome


def dialogue_of(artifact: bytes | None) -> Any:
    """The artifact read as the corpus reads a line (orjson), whatever JSON type it is: the
    reader judges it. Bytes orjson refuses (not JSON, NaN, bad UTF-8) become their text, so
    the line is rejected with a reason rather than lost."""
    if artifact is None:
        return None
    try:
        return orjson.loads(artifact)
    except orjson.JSONDecodeError:
        return artifact.decode("utf-8", "replace")


def problem_run_record(meta: dict, artifact: bytes | None) -> dict:
    """The joined line, as conformance/README.md says: identity and scores from the API entry,
    miner hotkey from the agent version, problem from the suite, dialogue from the artifact."""
    entry, result, version = meta["entry"], meta["result"], meta["agent_version"]
    return {
        "schema": PRIMARY,
        "eval_run_id": result.get("eval_run_id"), "agent_version_id": version.get("agent_version_id"),
        "miner_hotkey": version.get("miner_hotkey"), "validator_hotkey": result.get("validator_hotkey"),
        "race_id": entry.get("race_id"), "phase": entry.get("phase"), "suite_id": version.get("suite_id"),
        "problem_id": entry.get("problem_id"),
        "problem": meta.get("problem") or {"category": entry.get("category")},
        "status": result.get("status"), "score": result.get("score"),
        "reasoning_score": result.get("reasoning_score"),
        "inference_total": result.get("inference_total"),
        "inference_failure_count": result.get("inference_failure_count"),
        "execution_time": result.get("execution_time"), "updated_at": result.get("updated_at"),
        "dialogue": dialogue_of(artifact),
    }


def _line(record: dict) -> bytes:
    return orjson.dumps(record) + b"\n"  # everything in it came out of orjson or the SDK


READ_WINDOW = 256  # landed versions read at once while the day file is written


def _day_metas(landing: Store, day: str, pool: ThreadPoolExecutor) -> list[dict]:
    """Every landed version's meta of the day, oldest first (metas are small; many on S3)."""
    keys = [k for k in landing.list(_runs_prefix(day)) if k.endswith(".meta.json")]
    metas = list(pool.map(lambda k: json.loads(landing.read(k)), keys))
    metas.sort(key=lambda m: (updated_at_us(m["result"].get("updated_at")), m["result"].get("eval_run_id"),
                              m["entry"].get("problem_id")))
    return metas


def day_file_lines(landing: Store, metas: list[dict], pool: ThreadPoolExecutor) -> Iterator[bytes]:
    """One joined line per landed version, in the metas' order; artifacts are read a window at
    a time, so a day of any size streams."""
    def line(meta: dict) -> bytes:
        artifact = landing.read(meta["artifact"]["key"]) if meta.get("artifact") else None
        return _line(problem_run_record(meta, artifact))

    for start in range(0, len(metas), READ_WINDOW):
        yield from pool.map(line, metas[start:start + READ_WINDOW])


def land_day(api: OroApi, landing: Store, firehose: Store, day: str, cfg: IngestConfig) -> DayLanding:
    """Land the day and, when it is complete, replace its firehose file; see the module doc."""
    report = DayLanding(day)
    with ThreadPoolExecutor(max_workers=max(1, cfg.concurrency)) as pool:
        results, counts = day_results(api, day, cfg, pool)
        report.counts.update(counts)
        suite_ids = sorted({r.agent_version["suite_id"] for r in results if r.agent_version["suite_id"] is not None})
        problems = {s: suite_problems(api, s) for s in suite_ids}

        def land(found: DayResult) -> str:
            problem = problems.get(found.agent_version["suite_id"], {}).get(found.problem_id)
            try:
                return land_result(api, landing, day, found, problem)
            except ArtifactNotReleased:
                report.not_released.append(f"{found.eval_run_id}/{found.problem_id}")
                return "artifacts/not_released"

        report.counts.update(pool.map(land, results))
        if report.not_released:
            raise DayIncomplete(f"day {day} is incomplete: {len(report.not_released)} of {len(results)} artifacts "
                                f"are not released yet (e.g. eval run/problem {report.not_released[0]}); the rest is "
                                f"landed, the day file is left as it was; a later run fetches only what is missing")
        metas = _day_metas(landing, day, pool)
        report.counts["lines"] = len(metas)
        report.day_file = firehose.uri(f"day={day}/{DAY_FILE}")
        report.day_file_sha256, report.day_file_written = firehose.write_stream_if_changed(
            f"day={day}/{DAY_FILE}", day_file_lines(landing, metas, pool))
    manifest = {"day": day, "complete": True, "lines": report.counts["lines"], "day_file": report.day_file,
                "day_file_sha256": report.day_file_sha256, "counts": dict(sorted(report.counts.items()))}
    landing.write(f"day={day}/{MANIFEST}", orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
    return report
