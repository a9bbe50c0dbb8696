"""Corpus path throughput on one simulated firehose day, against a bare parse of the same files.

    python benchmarks/corpus.py [--traces 100000] [--arena DIR] [--day 2026-11-01] [--workers N] [--repeats 3]

In one process, on the same day files:
  (a) bare:    the fastest bare read, single process: zlib.decompressobj over 1 MiB reads,
               lines split from the chunks, `orjson.loads` per line (the floor's baseline);
  (c) core:    the fused corpus pass (corpus/corpus_parts: stage_file per file, superseded_day,
               split_file per file, the same functions the asset runs) without Dagster, single
               process; then the conservation recount (a second read of the day) on its own.
               The per-row work is Python (corpus/decide.py); nothing compiled of the project's own.
(a) and (c) run `--repeats` times, interleaved; the headline is the single-core ratio
median(a) / median(c) in throughput.
  (b) dagster: raw_firehose + the corpus step (five tables) + the blocking conservation check,
               materialized in-process on an ephemeral instance, lake in a temp folder,
               default workers (one process per firehose file); run once.
Peak memory: RUSAGE_SELF and RUSAGE_CHILDREN maxrss, plus a sampled peak of the summed RSS of
this process and its children (an over-count: forked workers share pages; see
corpus_memory.py for PSS and the slope against day size).

Floors (issue 17): (c)/(a) >= 0.35 single core, with no compiled code of the project's own; (b)/(a) >= 0.5 on 2 cores; peak RSS <= 1 GB,
the whole day through (b) <= 5 minutes.
The day is simulated when the arena folder does not hold it yet (`--arena` keeps it for reuse).
"""

from __future__ import annotations

import argparse
import importlib
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

RATIO_FLOOR = 0.5
CORE_RATIO_FLOOR = 0.35
RSS_FLOOR_BYTES = 1 * 10**9
DAY_FLOOR_S = 300.0


# ---- memory ------------------------------------------------------------------------------------


def maxrss_bytes(who: int) -> int:
    return resource.getrusage(who).ru_maxrss * 1024  # kilobytes on Linux


def tree_bytes(root: int, proc_file: str = "status", field: str = "VmRSS:") -> int:
    """Summed `field` of /proc/PID/`proc_file` over `root` and its descendants (Linux; 0
    elsewhere): VmRSS from status by default, Pss from smaps_rollup for forked pools."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            for line in Path(f"/proc/{pid}/{proc_file}").read_text().splitlines():
                if line.startswith(field):
                    total += int(line.split()[1]) * 1024
                    break
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
            continue
    return total


class TreeMemorySampler:
    """Peak of `tree_bytes` of this process tree, sampled every `interval` seconds."""

    def __init__(self, interval: float = 0.1, proc_file: str = "status", field: str = "VmRSS:") -> None:
        self.interval, self.peak = interval, 0
        self._measure = lambda: tree_bytes(os.getpid(), proc_file, field)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._measure())
            self._stop.wait(self.interval)

    def __enter__(self) -> TreeMemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._measure())


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
        with open(path, "rb") as stored:
            member, tail = zlib.decompressobj(wbits=31), b""
            while block := stored.read(1 << 20):
                while block:
                    try:
                        data = member.decompress(block)
                    except zlib.error:
                        block = b""
                        break
                    *complete, rest = data.split(b"\n")
                    if complete:  # only the line cut at the chunk's edge is joined, not the whole chunk
                        complete[0], tail = tail + complete[0], rest
                    else:
                        tail += rest
                    for raw in complete:
                        lines += 1
                        size += len(raw) + 1
                        try:
                            orjson.loads(raw)
                        except orjson.JSONDecodeError:
                            bad += 1
                    block = member.unused_data if member.eof else b""
                    if member.eof:
                        member = zlib.decompressobj(wbits=31)
            if tail:
                lines, size = lines + 1, size + len(tail)
    return lines, size, bad


# ---- (b) through Dagster --------------------------------------------------------------------------


def dagster_pass(firehose_root: Path, lake_root: Path, day: str, workers: int | None):
    import dagster as dg

    from resources.firehose import FirehoseResource
    from resources.lake import LakeResource
    from shopdistill_assets.corpus.assets import CORPUS_ASSETS, CORPUS_CHECKS
    from shopdistill_assets.ingest.assets import raw_firehose

    run_config: dict = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    if workers is not None:
        run_config["ops"] = {"corpus": {"config": {"workers": workers}}}
    result = dg.materialize(
        [raw_firehose, *CORPUS_ASSETS, *CORPUS_CHECKS], partition_key=day, instance=dg.DagsterInstance.ephemeral(),
        resources={"firehose": FirehoseResource(root=str(firehose_root)), "lake": LakeResource(root=str(lake_root))},
        run_config=run_config, raise_on_error=False,
    )
    steps = {e.step_key: e.event_specific_data.duration_ms / 1000 for e in result.all_events if e.is_step_success}
    checks = {e.check_name: (e.passed, {k: getattr(v, "value", v) for k, v in e.metadata.items()})
              for e in result.get_asset_check_evaluations()}
    return result.success, steps, checks


# ---- (c) the core functions without Dagster -------------------------------------------------------


def core_pass(firehose_root: Path, scratch: Path, day: str) -> tuple[dict[str, float], dict[str, int], dict[str, float]]:
    """Single process, the fused pass; returns (wall seconds per step, counts, CPU seconds per
    step)."""
    from resources.firehose import FirehoseResource
    from shopdistill_assets.corpus import corpus_parts as parts
    from shopdistill_assets.corpus.decide import DecideConfig
    from shopdistill_assets.corpus.lines import count_units

    firehose = FirehoseResource(root=str(firehose_root))
    files = firehose.list_day(day)
    times: dict[str, float] = {}
    cpu: dict[str, float] = {}

    def step(name, fn):
        start, start_cpu = time.perf_counter(), time.process_time()
        out = fn()
        times[name], cpu[name] = time.perf_counter() - start, time.process_time() - start_cpu
        return out

    staged = step("stage (read, decide)", lambda: [
        parts.stage_file(f.name, firehose.day_file_chunks(f), day, DecideConfig(), scratch / f"staged-{i:05d}.arrow")
        for i, f in enumerate(files)])
    superseded = step("superseded", lambda: parts.superseded_day(staged))
    splits = step("split", lambda: [
        parts.split_file(s, sup, day, {t: scratch / f"{t}-{i:05d}.parquet" for t in parts.TABLES})
        for i, (s, sup) in enumerate(zip(staged, superseded))])

    def recount() -> int:
        return sum(count_units(firehose.day_file_chunks(f)) for f in files)

    units = step("conservation recount", recount)
    counts = {
        "lines": sum(s.units for s in staged),
        "recount": units,
        **{t: sum(r.outputs[t] for r in splits) for t in parts.TABLES},
    }
    for p in scratch.iterdir():
        p.unlink()
    return times, counts, cpu


def pass_seconds(steps: dict[str, float]) -> float:
    """The fused pass's time: every step but the conservation recount (a second read of the day)."""
    return sum(steps.values()) - steps["conservation recount"]


# ---- report ----------------------------------------------------------------------------------------


def rate(lines: int, size: int, seconds: float) -> str:
    return f"{lines / seconds:10,.0f} traces/s {size / seconds / 1e6:8.1f} MB/s  ({seconds:7.2f} s)"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv: list[str] | None = None) -> int:
    from statistics import median

    from shopdistill_assets.corpus.parts_pool import default_workers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=100_000, help="traces to simulate when the day is absent")
    parser.add_argument("--arena", help="arena folder to reuse or simulate into (default: a temp folder)")
    parser.add_argument("--day", default="2026-11-01", help="YYYY-MM-DD (within the daily partitions)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, help=f"pool workers for (b) (default {default_workers()})")
    parser.add_argument("--repeats", type=int, default=3, help="runs of (a) and (c), interleaved; medians reported")
    parser.add_argument("--skip-dagster", action="store_true", help="only (a) and (c)")
    args = parser.parse_args(argv)

    # Imported before any clock starts: (b) and (c) time work, not imports.
    for module in ("dagster", "shopdistill_assets.corpus.assets"):
        importlib.import_module(module)

    work = Path(tempfile.mkdtemp(prefix="bench-corpus-"))
    try:
        arena = Path(args.arena) if args.arena else work / "arena"
        firehose_root = ensure_day(arena, args.day, args.traces, args.seed)
        files = sorted((firehose_root / f"day={args.day}").glob("*.jsonl.gz"))
        stored = sum(p.stat().st_size for p in files)
        print(f"day {args.day}: {len(files)} files, {stored / 1e6:.1f} MB stored, "
              f"cpus {os.cpu_count()}, workers {args.workers or default_workers()}, load {os.getloadavg()[0]:.1f}")

        scratch = work / "core"
        scratch.mkdir()
        bare_times, core_times, core_steps, core_rss = [], [], [], 0
        bare_cpu, core_cpu = [], []
        for _ in range(args.repeats):
            start, start_cpu = time.perf_counter(), time.process_time()
            lines, size, bad = bare_pass(files)
            bare_times.append(time.perf_counter() - start)
            bare_cpu.append(time.process_time() - start_cpu)
            with TreeMemorySampler(0.05) as sampler:
                times, counts, cpu = core_pass(firehose_root, scratch, args.day)
            core_rss = max(core_rss, sampler.peak)
            core_steps.append(times)
            core_times.append(pass_seconds(times))
            core_cpu.append(pass_seconds(cpu))
        t_bare, t_core = median(bare_times), median(core_times)
        print(f"  {lines:,} lines ({bad} unparsable), {size / 1e6:.1f} MB uncompressed")
        print(f"(a) bare zlib + orjson.loads      {rate(lines, size, t_bare)}  runs {', '.join(f'{t:.1f}' for t in bare_times)} s")
        print(f"(c) fused core path, 1 process    {rate(lines, size, t_core)}  runs {', '.join(f'{t:.1f}' for t in core_times)} s,"
              f" peak RSS {core_rss / 1e9:.2f} GB")
        last = core_steps[-1]
        print("      steps (last run): " + ", ".join(f"{k} {v:.1f} s" for k, v in last.items()))
        kept = counts["gated_traces"] + counts["subtask_traces"]
        conserved = counts["lines"] == counts["recount"] == kept + counts["rejected_traces"]
        print(f"      {counts['lines']} lines = {counts['gated_traces']} gated + {counts['subtask_traces']} subtask "
              f"+ {counts['rejected_traces']} rejected: {'conserved' if conserved else 'NOT CONSERVED'}")
        core_ratio = t_bare / t_core
        print(f"single-core ratio (c)/(a) in throughput: {core_ratio:.2f} (median of {args.repeats})")
        # CPU seconds of this process: steadier than wall time where other jobs share the cores.
        print(f"  the same in CPU time: {median(bare_cpu) / median(core_cpu):.2f} (bare {median(bare_cpu):.2f} s, "
              f"core {median(core_cpu):.2f} s of CPU)")
        checks_ok = [(f"single-core ratio {core_ratio:.3f} >= {CORE_RATIO_FLOOR}", core_ratio >= CORE_RATIO_FLOOR),
                     ("core path conserved every line", conserved),
                     (f"peak RSS of (c) {core_rss / 1e9:.2f} GB <= {RSS_FLOOR_BYTES / 1e9:.0f} GB",
                      core_rss <= RSS_FLOOR_BYTES)]

        if not args.skip_dagster:
            with TreeMemorySampler() as sampler:
                start = time.perf_counter()
                ok, steps, checks = dagster_pass(firehose_root, work / "lake", args.day, args.workers)
                t_dagster = time.perf_counter() - start
            rss_self, rss_child = maxrss_bytes(resource.RUSAGE_SELF), maxrss_bytes(resource.RUSAGE_CHILDREN)
            print(f"(b) dagster, corpus step          {rate(lines, size, t_dagster)}  run {'ok' if ok else 'FAILED'}")
            print("      steps: " + ", ".join(f"{k} {v:.1f} s" for k, v in steps.items()))
            conservation = checks.get("conservation")
            if conservation:
                meta = conservation[1]
                print(f"      conservation {'passed' if conservation[0] else 'FAILED'}: {meta.get('lines_read')} lines "
                      f"read = {meta.get('gated_traces')} gated + {meta.get('subtask_traces')} subtask "
                      f"+ {meta.get('rejected_traces')} rejected")
            ratio = t_bare / t_dagster
            peak = sampler.peak
            print(f"throughput (b)/(a) {ratio:.2f}")
            print(f"peak RSS: self {rss_self / 1e9:.2f} GB, largest child {rss_child / 1e9:.2f} GB, sampled process "
                  f"tree {peak / 1e9:.2f} GB (summed RSS counts pages shared with forked workers once per worker)")
            checks_ok += [
                (f"(b)/(a) throughput ratio {ratio:.2f} >= {RATIO_FLOOR}", ratio >= RATIO_FLOOR),
                (f"largest process maxrss {max(rss_self, rss_child) / 1e9:.2f} GB <= {RSS_FLOOR_BYTES / 1e9:.0f} GB",
                 max(rss_self, rss_child) <= RSS_FLOOR_BYTES),
                (f"whole day through Dagster {t_dagster:.0f} s <= {DAY_FLOOR_S:.0f} s", t_dagster <= DAY_FLOOR_S),
                ("run succeeded and conservation passed", ok and bool(conservation and conservation[0])),
            ]
        for label, good in checks_ok:
            print(f"{verdict(good)}  {label}")
        return 0 if all(good for _, good in checks_ok) else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
