"""Corpus path throughput on one simulated firehose day, against a bare parse of the same files.

    python benchmarks/corpus.py [--traces 100000] [--arena DIR] [--day 2026-11-01] [--workers N]

In one process, on the same day files:
  (a) bare:    gunzip + `orjson.loads` per line, single process (the floor's baseline);
  (b) dagster: normalized_traces -> structural_traces -> gated_traces -> rejected_traces and
               the blocking conservation check, materialized in-process on an ephemeral
               instance, lake in a temp folder, default workers (one process per part);
  (c) core:    the same `core.corpus_parts` functions (normalize_part, superseded,
               dedupe_part, structural_part, gate_part, write_ledger) without Dagster, single
               process; then the conservation recount (a second gunzip of the day) on its own.
(b)/(a) in throughput is the figure the floor is about. (b) runs parts in parallel, (c) does
not, so (c) vs (b) shows orchestration cost net of that parallelism, and (c) vs (a) what the
corpus work itself costs per line. Peak memory: RUSAGE_SELF and RUSAGE_CHILDREN maxrss (the
pool workers are children; the latter is the largest single child, counting pages shared with
the parent at fork), plus a sampled peak of the summed RSS of this process and its children.

Floors (the issue): (b)/(a) >= 0.3, peak RSS <= 3 GB, the whole day through (b) <= 5 minutes.
The day is simulated when the arena folder does not hold it yet (`--arena` keeps it for reuse).
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
import zlib
from datetime import date
from pathlib import Path

import orjson

RATIO_FLOOR = 0.3
RSS_FLOOR_BYTES = 3 * 10**9
DAY_FLOOR_S = 300.0


# ---- memory ------------------------------------------------------------------------------------


def maxrss_bytes(who: int) -> int:
    return resource.getrusage(who).ru_maxrss * 1024  # kilobytes on Linux


def _tree_rss_bytes(root: int) -> int:
    """Summed VmRSS of `root` and its descendants (Linux /proc; 0 elsewhere)."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
            continue
    return total


class TreeRssSampler:
    """Peak of the summed RSS of this process tree, sampled every `interval` seconds."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval, self.peak = interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _tree_rss_bytes(os.getpid()))
            self._stop.wait(self.interval)

    def __enter__(self) -> TreeRssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _tree_rss_bytes(os.getpid()))


# ---- the day -----------------------------------------------------------------------------------


def ensure_day(arena: Path, day: str, traces: int, seed: int) -> Path:
    """The arena's firehose root, simulating the day first if it is not there."""
    folder = arena / "firehose" / f"day={day}"
    if folder.is_dir() and any(folder.glob("*.jsonl*")):
        print(f"reusing {folder}")
        return arena / "firehose"
    from shopdistill_assets.sim import ArenaConfig, simulate

    start = time.perf_counter()
    simulate(ArenaConfig(out=arena, start_day=date.fromisoformat(day), days=1, traces_per_day=traces, seed=seed))
    print(f"simulated {traces} traces into {folder} in {time.perf_counter() - start:.1f} s")
    return arena / "firehose"


# ---- (a) bare pass -------------------------------------------------------------------------------


def bare_pass(files: list[Path]) -> tuple[int, int, int]:
    """(lines, uncompressed bytes incl. newlines, lines that did not parse); stops at a cut file's end."""
    lines = size = bad = 0
    for path in files:
        with gzip.open(path, "rb") as stream:
            try:
                for raw in stream:
                    lines += 1
                    size += len(raw)
                    try:
                        orjson.loads(raw)
                    except orjson.JSONDecodeError:
                        bad += 1
            except (EOFError, OSError, zlib.error):
                pass
    return lines, size, bad


# ---- (b) through Dagster --------------------------------------------------------------------------


def dagster_pass(firehose_root: Path, lake_root: Path, day: str, workers: int | None):
    import dagster as dg

    from resources.firehose import FirehoseResource
    from resources.lake import LakeResource
    from shopdistill_assets.corpus import CORPUS_ASSETS, CORPUS_CHECKS

    run_config: dict = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    if workers is not None:
        run_config["ops"] = {op: {"config": {"workers": workers}}
                             for op in ("normalized_traces", "structural_traces", "gated_traces")}
    result = dg.materialize(
        [*CORPUS_ASSETS, *CORPUS_CHECKS], partition_key=day, instance=dg.DagsterInstance.ephemeral(),
        resources={"firehose": FirehoseResource(root=str(firehose_root)), "lake": LakeResource(root=str(lake_root))},
        run_config=run_config, raise_on_error=False,
    )
    steps = {e.step_key: e.event_specific_data.duration_ms / 1000 for e in result.all_events if e.is_step_success}
    checks = {e.check_name: (e.passed, {k: getattr(v, "value", v) for k, v in e.metadata.items()})
              for e in result.get_asset_check_evaluations()}
    return result.success, steps, checks


# ---- (c) the core functions without Dagster -------------------------------------------------------


def core_pass(firehose_root: Path, scratch: Path, day: str) -> tuple[dict[str, float], dict[str, int]]:
    """Single process; returns (seconds per stage, counts)."""
    from resources.firehose import FirehoseResource
    from shopdistill_assets.core import corpus_parts as parts
    from shopdistill_assets.core.gates import GateConfig
    from shopdistill_assets.core.structural import StructuralConfig

    firehose = FirehoseResource(root=str(firehose_root))
    files = firehose.list_day(day)
    times: dict[str, float] = {}

    def stage(name, fn):
        start = time.perf_counter()
        out = fn()
        times[name] = time.perf_counter() - start
        return out

    staged = [scratch / f"staged-{i:05d}.parquet" for i in range(len(files))]
    finals = [scratch / f"final-{i:05d}.parquet" for i in range(len(files))]
    agentic = [scratch / f"agentic-{i:05d}.parquet" for i in range(len(files))]
    subtask = [scratch / f"subtask-{i:05d}.parquet" for i in range(len(files))]
    gated = [scratch / f"gated-{i:05d}.parquet" for i in range(len(files))]
    normalized = stage("normalize", lambda: [
        parts.normalize_part(day, f.name, lambda f=f: firehose.open_day_file(f), out) for f, out in zip(files, staged)])
    losers = parts.superseded(key for r in normalized for key in r.keys)
    deduped = stage("dedupe", lambda: [parts.dedupe_part(s, f, losers) for s, f in zip(staged, finals)])
    structural = stage("structural", lambda: [
        parts.structural_part(f, a, s, StructuralConfig()) for f, a, s in zip(finals, agentic, subtask)])
    gates = stage("gates", lambda: [parts.gate_part(a, g, GateConfig()) for a, g in zip(agentic, gated)])
    ledger = [row for results in (normalized, deduped, structural, gates) for r in results for row in r.ledger]
    stage("ledger", lambda: parts.write_ledger(ledger, scratch / "rejected.parquet"))
    recount = stage("conservation recount", lambda: sum(
        1 for f in files for _ in parts.read_units(f.name, firehose.open_day_file(f), day)))
    counts = {
        "lines": sum(r.units for r in normalized),
        "recount": recount,
        "gated": sum(r.kept for r in gates),
        "subtask": sum(r.outputs["subtask_traces"] for r in structural),
        "rejected": len(ledger),
    }
    return times, counts


# ---- report ----------------------------------------------------------------------------------------


def rate(lines: int, size: int, seconds: float) -> str:
    return f"{lines / seconds:10,.0f} traces/s {size / seconds / 1e6:8.1f} MB/s  ({seconds:7.2f} s)"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv: list[str] | None = None) -> int:
    from shopdistill_assets.parts_pool import default_workers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=100_000, help="traces to simulate when the day is absent")
    parser.add_argument("--arena", help="arena folder to reuse or simulate into (default: a temp folder)")
    parser.add_argument("--day", default="2026-11-01", help="YYYY-MM-DD (within the daily partitions)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, help=f"pool workers for (b) (default {default_workers()})")
    args = parser.parse_args(argv)

    # Imported before any clock starts: (b) and (c) time work, not imports.
    import dagster  # noqa: F401

    import shopdistill_assets.corpus  # noqa: F401

    work = Path(tempfile.mkdtemp(prefix="bench-corpus-"))
    try:
        arena = Path(args.arena) if args.arena else work / "arena"
        firehose_root = ensure_day(arena, args.day, args.traces, args.seed)
        files = sorted((firehose_root / f"day={args.day}").glob("*.jsonl.gz"))
        stored = sum(p.stat().st_size for p in files)
        print(f"day {args.day}: {len(files)} files, {stored / 1e6:.1f} MB stored, "
              f"cpus {os.cpu_count()}, workers {args.workers or default_workers()}")

        start = time.perf_counter()
        lines, size, bad = bare_pass(files)
        t_bare = time.perf_counter() - start
        print(f"  {lines:,} lines ({bad} unparsable), {size / 1e6:.1f} MB uncompressed")
        print(f"(a) bare gunzip + orjson.loads   {rate(lines, size, t_bare)}")

        with TreeRssSampler() as sampler:
            start = time.perf_counter()
            ok, steps, checks = dagster_pass(firehose_root, work / "lake", args.day, args.workers)
            t_dagster = time.perf_counter() - start
        rss_self, rss_child = maxrss_bytes(resource.RUSAGE_SELF), maxrss_bytes(resource.RUSAGE_CHILDREN)
        print(f"(b) dagster, corpus assets       {rate(lines, size, t_dagster)}  run {'ok' if ok else 'FAILED'}")
        print("      steps: " + ", ".join(f"{k} {v:.1f} s" for k, v in steps.items()))
        conservation = checks.get("conservation")
        if conservation:
            meta = conservation[1]
            verdict_word = "passed" if conservation[0] else "FAILED"
            print(f"      conservation {verdict_word}: {meta.get('lines_read')} lines read "
                  f"= {meta.get('gated_traces')} gated + {meta.get('subtask_traces')} subtask "
                  f"+ {meta.get('rejected_traces')} rejected")

        scratch = work / "core"
        scratch.mkdir()
        start = time.perf_counter()
        times, counts = core_pass(firehose_root, scratch, args.day)
        t_core = time.perf_counter() - start
        t_core_work = t_core - times["conservation recount"]
        recount_s = times["conservation recount"]
        print(f"(c) core functions, 1 process    {rate(lines, size, t_core_work)}  (+ recount {recount_s:.1f} s)")
        print("      stages: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
        conserved = counts["lines"] == counts["recount"] == counts["gated"] + counts["subtask"] + counts["rejected"]
        print(f"      {counts['lines']} lines = {counts['gated']} gated + {counts['subtask']} subtask "
              f"+ {counts['rejected']} rejected: {'conserved' if conserved else 'NOT CONSERVED'}")

        ratio = t_bare / t_dagster
        peak = sampler.peak
        print(f"throughput (b)/(a) {ratio:.2f}; (c)/(a) {t_bare / t_core_work:.2f}; "
              f"(b)/(c incl. recount) {t_core / t_dagster:.2f}")
        print(f"peak RSS: self {rss_self / 1e9:.2f} GB, largest child {rss_child / 1e9:.2f} GB, "
              f"sampled process tree {peak / 1e9:.2f} GB (maxrss measured after (b); (c) runs in the same process)")
        checks_ok = [
            (f"(b)/(a) throughput ratio {ratio:.2f} >= {RATIO_FLOOR}", ratio >= RATIO_FLOOR),
            (f"peak RSS {max(peak, rss_self) / 1e9:.2f} GB <= {RSS_FLOOR_BYTES / 1e9:.0f} GB",
             max(peak, rss_self) <= RSS_FLOOR_BYTES),
            (f"whole day through Dagster {t_dagster:.0f} s <= {DAY_FLOOR_S:.0f} s", t_dagster <= DAY_FLOOR_S),
            ("run succeeded and conservation passed", ok and bool(conservation and conservation[0]) and conserved),
        ]
        for label, good in checks_ok:
            print(f"{verdict(good)}  {label}")
        return 0 if all(good for _, good in checks_ok) else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
