"""`shopdistill simulate`: write a simulated SN15 arena.

    DIR/catalog/documents.jsonl.gz     the world (ShoppingBench documents shape)
    DIR/suites/{product,shop,voucher}.json   every phrasing asked, with ground truth
    DIR/firehose/day=YYYY-MM-DD/part-NNN.jsonl.gz   the days, streamed
    DIR/truth/day=YYYY-MM-DD.jsonl.gz  per line: the style, fault, latent problem, corruption
                                       (what a test measures the pipeline against; never an input)
"""

from __future__ import annotations

import gzip
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from shopdistill_assets.sandbox import Catalog, Problem, Sandbox, score_trace_calls, write_catalog, write_suite
from shopdistill_assets.sim.agents import FAULTS, AgentRun, inject_fault, run_agentic, run_decoy, run_subtask
from shopdistill_assets.sim.catalog_gen import CatalogSpec, generate_catalog
from shopdistill_assets.sim.problems_gen import LatentProblem, generate_latent_problems
from shopdistill_assets.sim.records import (
    iso, judge_gate_tree, openai_messages, render_dialogue, shoppingbench_rollout,
)

STYLES = ("agentic", "subtask", "decoy", "broken", "failed", "timeout")
DEFAULT_MIX = {"agentic": 0.55, "subtask": 0.2, "decoy": 0.06, "broken": 0.09, "failed": 0.06, "timeout": 0.04}
VALIDATORS = ["5Gvalidator" + c * 37 for c in "ABCD"]
LINES_PER_FILE = 25_000
_NS = uuid.UUID("8d7e6f5a-4b3c-2d1e-0f9a-8b7c6d5e4f3a")


@dataclass
class ArenaConfig:
    out: Path
    start_day: date = date(2026, 11, 1)
    days: int = 1
    traces_per_day: int = 1000
    seed: int = 0
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    n_products: int = 4000
    n_miners: int = 40
    problems_per_day: int | None = None  # default: traces_per_day / 25, between 20 and 1500
    other_dialect_share: float = 0.04  # half shoppingbench.rollout, half openai.messages
    corrupt_share: float = 0.005
    reupload_share: float = 0.01
    truncated_file: bool = True

    def day_list(self) -> list[date]:
        return [self.start_day + timedelta(days=d) for d in range(self.days)]


@dataclass(frozen=True)
class Miner:
    hotkey: str
    agent_version_id: str
    style: str
    skill: float


class _GzipLines:
    """A deterministic gzip stream of lines (mtime 0, no file name)."""

    def __init__(self, path: Path) -> None:
        self._fh: BinaryIO = open(path, "wb")
        self._gz = gzip.GzipFile(fileobj=self._fh, mode="wb", mtime=0, filename="", compresslevel=5)
        self.lines = 0

    def write(self, line: bytes) -> int:
        self._gz.write(line + b"\n")
        self.lines += 1
        return self.lines

    def close(self) -> None:
        self._gz.close()
        self._fh.close()


def _miners(rng: random.Random, cfg: ArenaConfig) -> list[Miner]:
    styles = [s for s in STYLES if s not in ("failed", "timeout")]
    weights = [cfg.mix.get(s, 0.0) for s in styles]
    miners = []
    for i in range(cfg.n_miners):
        style = rng.choices(styles, weights=weights)[0] if sum(weights) > 0 else "agentic"
        miners.append(Miner(f"5{rng.getrandbits(160):040x}", str(uuid.uuid5(_NS, f"{cfg.seed}:agent:{i}")),
                            style, round(rng.uniform(0.4, 0.95), 2)))
    return miners


def build_world(cfg: ArenaConfig) -> tuple[Catalog, list[LatentProblem]]:
    rng = random.Random(f"{cfg.seed}:world")
    products = generate_catalog(rng, CatalogSpec(n_products=cfg.n_products))
    per_day = cfg.problems_per_day or min(1500, max(20, cfg.traces_per_day // 25))
    latent = generate_latent_problems(rng, products, n=max(per_day, per_day * (cfg.days + 1) // 2))
    return Catalog.from_products(products), latent


def _day_problems(cfg: ArenaConfig, latent: list[LatentProblem], day: date) -> list[tuple[LatentProblem, Problem]]:
    rng = random.Random(f"{cfg.seed}:problems:{day.isoformat()}")
    per_day = min(len(latent), cfg.problems_per_day or min(1500, max(20, cfg.traces_per_day // 25)))
    chosen = rng.sample(latent, per_day)
    return [(lp, lp.variant(rng.randrange(lp.n_variants))) for lp in chosen]


def _run(style: str, miner: Miner, problem: Problem, lp: LatentProblem, sandbox: Sandbox, rng: random.Random) -> AgentRun:
    if style == "agentic":
        return run_agentic(problem, lp, sandbox, rng, miner.skill, terse=rng.random() < 0.15)
    if style == "subtask":
        return run_subtask(problem, lp, sandbox, rng, miner.skill)
    if style == "decoy":
        return run_decoy(problem, lp, sandbox, rng)
    run = run_agentic(problem, lp, sandbox, rng, miner.skill)
    return inject_fault(run, rng.choice(FAULTS), rng)


def _record(cfg: ArenaConfig, day: date, i: int, miners: list[Miner], problems, sandbox: Sandbox) -> tuple[dict, dict]:
    rng = random.Random(f"{cfg.seed}:{day.isoformat()}:{i}")
    miner = rng.choice(miners)
    lp, problem = rng.choice(problems)
    style = miner.style
    roll = rng.random()
    if roll < cfg.mix.get("failed", 0.0):
        style = "failed"
    elif roll < cfg.mix.get("failed", 0.0) + cfg.mix.get("timeout", 0.0):
        style = "timeout"
    day_ms = int(datetime(day.year, day.month, day.day, tzinfo=timezone.utc).timestamp() * 1000)
    start = day_ms + int(i / max(cfg.traces_per_day, 1) * 85_000_000) + rng.randrange(60_000)
    record: dict[str, Any] = {
        "schema": "sn15.problem_run/v1",
        "eval_run_id": str(uuid.uuid5(_NS, f"{cfg.seed}:{day.isoformat()}:run:{i}")),
        "agent_version_id": miner.agent_version_id, "miner_hotkey": miner.hotkey,
        "validator_hotkey": rng.choice(VALIDATORS), "race_id": 400 + (day - cfg.start_day).days,
        "phase": "RACE" if rng.random() < 0.8 else "QUALIFYING", "suite_id": 3, "problem_id": problem.problem_id,
        "problem": {"query": problem.query, "category": problem.category, "difficulty": problem.difficulty,
                    "title": problem.title},
    }
    truth = {"eval_run_id": record["eval_run_id"], "problem_id": problem.problem_id, "latent_id": lp.latent_id,
             "style": style, "fault": None, "success": False, "dialect": "sn15.problem_run/v1"}
    if style in ("failed", "timeout"):
        record.update(status="FAILED" if style == "failed" else "TIMED_OUT", score=0.0, reasoning_score=None,
                      reasoning_explanation=None, reasoning_model=None, inference_total=rng.randint(0, 3),
                      inference_failure_count=rng.randint(0, 2), execution_time=300.0 if style == "timeout" else 12.5,
                      updated_at=iso(start + 300_000), dialogue=rng.choice([[], None]))
        return record, truth
    run = _run(style, miner, problem, lp, sandbox, rng)
    outcome = score_trace_calls(problem, run.tool_calls(), sandbox.catalog)
    dialogue, tokens, end = render_dialogue(run, problem, start, rng)
    judge, explanation = judge_gate_tree(run, tokens)
    record.update(status="SUCCESS", score=outcome.score, reasoning_score=judge, reasoning_explanation=explanation,
                  reasoning_model="zai-org/GLM-5.1-TEE", inference_total=len(tokens), inference_failure_count=0,
                  execution_time=round((end - start) / 1000, 1), updated_at=iso(end), dialogue=dialogue)
    truth.update(fault=run.fault, success=outcome.success, judge=judge)
    record["_run"] = run  # for the other dialects; removed before writing
    return record, truth


def _corrupt(rng: random.Random, line: bytes) -> tuple[bytes, str]:
    kind = rng.choice(["bad_json", "wrong_types", "not_an_object", "unknown_dialect"])
    if kind == "bad_json":
        return line[: rng.randrange(10, max(11, len(line) // 2))], kind
    if kind == "not_an_object":
        return b'"just a string"', kind
    if kind == "unknown_dialect":
        return b'{"hello": "world", "rows": [1, 2, 3]}', kind
    obj = orjson.loads(line)
    if not isinstance(obj, dict) or "dialogue" not in obj:  # another dialect: break its shape instead
        return orjson.dumps({"id": 17, "messages": "not a list", "tools": {}}), kind
    obj.update(score="high", dialogue="not a list", problem=["q"], updated_at=12345)
    return orjson.dumps(obj), kind


def _encode(cfg: ArenaConfig, record: dict, truth: dict, rng: random.Random) -> bytes:
    run: AgentRun | None = record.pop("_run", None)
    share = cfg.other_dialect_share
    roll = rng.random()
    if run is not None and run.style == "agentic" and roll < share:
        problem = Problem.from_dict({**record["problem"], "problem_id": record["problem_id"], "reward": {"product_id": "0"}})
        if roll < share / 2:
            truth["dialect"] = "shoppingbench.rollout"
            return orjson.dumps(shoppingbench_rollout(run, problem, 0))
        truth["dialect"] = "openai.messages"
        return orjson.dumps(openai_messages(run, problem, f"sim-{record['eval_run_id']}"))
    return orjson.dumps(record)


def _day_lines(cfg: ArenaConfig, day: date, miners, problems, sandbox: Sandbox,
               carried: list[tuple[bytes, dict]], deferred: list[tuple[bytes, dict]]) -> Iterator[tuple[bytes, dict]]:
    """Lines of one day in order, with re-uploads and corruption mixed in. Some re-uploads land
    on the next day (`deferred`), as a late validator upload does."""
    rng = random.Random(f"{cfg.seed}:{day.isoformat()}:mix")
    yield from carried
    pending: list[tuple[int, dict, dict]] = []
    for i in range(cfg.traces_per_day):
        record, truth = _record(cfg, day, i, miners, problems, sandbox)
        line = _encode(cfg, record, truth, rng)
        if rng.random() < cfg.corrupt_share:
            line, kind = _corrupt(rng, line)
            truth = {**truth, "corrupt": kind}
        elif truth["dialect"] == "sn15.problem_run/v1" and rng.random() < cfg.reupload_share:
            if rng.random() < 0.2:
                deferred.append(_reupload(record, truth, rng, next_day=day + timedelta(days=1)))
            else:
                pending.append((i + rng.randint(1, 50), record, truth))
        yield line, truth
        while pending and pending[0][0] <= i:
            _, rec, tr = pending.pop(0)
            yield _reupload(rec, tr, rng)
    for _, rec, tr in pending:
        yield _reupload(rec, tr, rng)


def _reupload(record: dict, truth: dict, rng: random.Random, next_day: date | None = None) -> tuple[bytes, dict]:
    again = dict(record)
    stamp = datetime.strptime(record["updated_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    if next_day is not None:
        stamp = datetime(next_day.year, next_day.month, next_day.day, tzinfo=timezone.utc)
    again["updated_at"] = iso(int((stamp + timedelta(seconds=rng.randint(1, 600))).timestamp() * 1000))
    if again.get("reasoning_score") is not None:
        again["reasoning_score"] = rng.choice([record["reasoning_score"], 0.7, 0.9])
    return orjson.dumps(again), {**truth, "reupload": True}


def _write_truncated(path: Path, lines: list[bytes]) -> None:
    """Two gzip members; the second is cut short, as an interrupted upload leaves it."""
    half = len(lines) // 2
    first = gzip.compress(b"".join(l + b"\n" for l in lines[:half]), mtime=0)
    second = gzip.compress(b"".join(l + b"\n" for l in lines[half:]), mtime=0)
    path.write_bytes(first + second[: len(second) * 2 // 3])


def simulate_day(cfg: ArenaConfig, day: date, latent: list[LatentProblem], sandbox: Sandbox,
                 carried: list[tuple[bytes, dict]], deferred: list[tuple[bytes, dict]]) -> dict:
    miners = _miners(random.Random(f"{cfg.seed}:miners"), cfg)
    problems = _day_problems(cfg, latent, day)
    folder = cfg.out / "firehose" / f"day={day.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*"):
        stale.unlink()
    truth_path = cfg.out / "truth" / f"day={day.isoformat()}.jsonl.gz"
    truth_path.parent.mkdir(parents=True, exist_ok=True)
    truth_out = _GzipLines(truth_path)
    writer: _GzipLines | None = None
    n_files = lines = 0
    for line, truth in _day_lines(cfg, day, miners, problems, sandbox, carried, deferred):
        if writer is None or writer.lines >= LINES_PER_FILE:
            if writer:
                writer.close()
            name = f"part-{n_files:03d}.jsonl.gz"
            writer, n_files = _GzipLines(folder / name), n_files + 1
        lineno = writer.write(line)
        truth_out.write(orjson.dumps({"source_file": name, "source_line": lineno, **truth}))
        lines += 1
    if writer:
        writer.close()
    if cfg.truncated_file and cfg.corrupt_share > 0:
        rng = random.Random(f"{cfg.seed}:{day.isoformat()}:truncated")
        extra = [orjson.dumps({k: v for k, v in _record(cfg, day, cfg.traces_per_day + j, miners, problems, sandbox)[0].items()
                               if k != "_run"}) for j in range(rng.randint(4, 8))]
        _write_truncated(folder / "part-zzz-late.jsonl.gz", extra)
    truth_out.close()
    return {"day": day.isoformat(), "files": n_files + (1 if cfg.truncated_file and cfg.corrupt_share > 0 else 0),
            "lines": lines, "problems": len(problems)}


def simulate(cfg: ArenaConfig, on_day=None) -> dict:
    """Write the whole arena; returns a summary. `on_day(day)`, when given, is called after each
    day is written (the CLI's progress)."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    catalog, latent = build_world(cfg)
    write_catalog(catalog, cfg.out / "catalog" / "documents.jsonl.gz")
    sandbox = Sandbox(catalog)
    asked: dict[str, Problem] = {}
    for day in cfg.day_list():
        for lp, problem in _day_problems(cfg, latent, day):
            asked[problem.problem_id] = problem
    for category in ("Product", "Shop", "Voucher"):
        chosen = sorted((p for p in asked.values() if p.category == category), key=lambda p: p.problem_id)
        write_suite(chosen, cfg.out / "suites" / f"{category.lower()}.json")
    latent_of = {lp.variant(v).problem_id: lp.latent_id for lp in latent for v in range(lp.n_variants)}
    (cfg.out / "suites" / "latent.json").write_bytes(orjson.dumps(dict(sorted(latent_of.items())), option=orjson.OPT_INDENT_2))
    days, carried = [], []
    for day in cfg.day_list():
        deferred: list[tuple[bytes, dict]] = []
        days.append(simulate_day(cfg, day, latent, sandbox, carried, deferred))
        carried = deferred
        if on_day is not None:
            on_day(day)
    return {"out": str(cfg.out), "products": len(catalog), "latent_problems": len(latent), "days": days}
