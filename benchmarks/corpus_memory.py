"""Peak memory of the corpus path against day size: it must not grow with the day.

    python benchmarks/corpus_memory.py [--sizes 10000 100000 300000] [--arena DIR] [--workers N]

For each size, a simulated day (kept under `--arena` for reuse; simulating 300k traces takes
a while) is run twice, each run in a fresh process so its peak is its own:
  core:    the fused pass (corpus/corpus_parts: stage_file, superseded_day, split_file) in one
           process, no Dagster: the per-line path's own footprint;
  dagster: raw_firehose + the corpus step + the conservation check, materialized in-process
           on an ephemeral instance with the default process pool (one firehose file per task).
Peak memory is the sampled peak of the summed PSS (proportional set size, /proc/PID/smaps_rollup)
of the run's process tree: forked pool workers share the parent's pages, which a sum of RSS
would count once per worker; PSS splits them. The single largest maxrss is shown beside it. The slope is the least-squares fit of peak
against lines, in MB per 100k lines: flat is ~0. Target (issue 10): <= 1 GB at 100k lines.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import TreeMemorySampler, ensure_day, maxrss_bytes, tree_bytes  # noqa: E402

DAY = "2026-11-01"
TARGET_BYTES = 10**9


PSS = ("smaps_rollup", "Pss:")  # forked pool workers share the parent's pages: PSS splits them


def run_core(firehose_root: Path, day: str, out: Path) -> dict:
    from resources.firehose import FirehoseResource
    from shopdistill_assets.corpus import corpus_parts as parts
    from shopdistill_assets.corpus.decide import DecideConfig

    firehose = FirehoseResource(root=str(firehose_root))
    files = firehose.list_day(day)
    staged = [parts.stage_file(f.name, firehose.day_file_chunks(f), day, DecideConfig(), out / f"s{i}.arrow")
              for i, f in enumerate(files)]
    rows: dict[str, int] = {}
    for i, (s, superseded) in enumerate(zip(staged, parts.superseded_day(staged))):
        split = parts.split_file(s, superseded, day, {t: out / f"{t}-{i}.parquet" for t in parts.TABLES})
        s.path.unlink()
        for table, n in split.outputs.items():
            rows[table] = rows.get(table, 0) + n
    return {"lines": sum(s.units for s in staged), **rows}


def run_dagster(firehose_root: Path, day: str, out: Path, workers: int | None) -> dict:
    import dagster as dg

    from resources.firehose import FirehoseResource
    from resources.lake import LakeResource
    from shopdistill_assets.corpus.assets import CORPUS_ASSETS, CORPUS_CHECKS
    from shopdistill_assets.ingest.assets import raw_firehose

    run_config: dict = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    if workers:
        run_config["ops"] = {"corpus": {"config": {"workers": workers}}}
    result = dg.materialize([raw_firehose, *CORPUS_ASSETS, *CORPUS_CHECKS], partition_key=day,
                            instance=dg.DagsterInstance.ephemeral(), run_config=run_config, raise_on_error=False,
                            resources={"firehose": FirehoseResource(root=str(firehose_root)),
                                       "lake": LakeResource(root=str(out / "lake"))})
    checks = [e.passed for e in result.get_asset_check_evaluations()]
    return {"success": result.success, "conserved": bool(checks) and all(checks)}


def one_run(mode: str, firehose_root: Path, day: str, workers: int | None) -> None:
    """Child process: run one mode, print its figures as one JSON line."""
    for module in ("dagster", "shopdistill_assets.corpus.assets"):  # before the clock and the sampler
        importlib.import_module(module)  # imports are not the path

    base = tree_bytes(os.getpid(), *PSS)
    with tempfile.TemporaryDirectory(prefix="bench-mem-") as tmp, TreeMemorySampler(0.05, *PSS) as sampler:
        start = time.perf_counter()
        figures = run_core(firehose_root, day, Path(tmp)) if mode == "core" else \
            run_dagster(firehose_root, day, Path(tmp), workers)
        seconds = time.perf_counter() - start
    maxrss = max(maxrss_bytes(resource.RUSAGE_SELF), maxrss_bytes(resource.RUSAGE_CHILDREN))
    print(json.dumps({"mode": mode, "peak": sampler.peak, "maxrss": maxrss, "after_imports": base,
                      "seconds": seconds, **figures}))


def measure(mode: str, firehose_root: Path, day: str, workers: int | None) -> dict:
    cmd = [sys.executable, __file__, "--one", mode, str(firehose_root), day] + (["--workers", str(workers)] if workers else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def slope_mb_per_100k(points: list[tuple[int, int]]) -> float:
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / var * 100_000 / 1e6 if var else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 300_000])
    parser.add_argument("--arena", help="folder of simulated days, one subfolder per size (default: a temp folder)")
    parser.add_argument("--workers", type=int, help="pool workers for the dagster run (default: the config's)")
    parser.add_argument("--modes", nargs="+", default=["core", "dagster"], choices=["core", "dagster"])
    parser.add_argument("--one", nargs=3, metavar=("MODE", "FIREHOSE", "DAY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        one_run(args.one[0], Path(args.one[1]), args.one[2], args.workers)
        return 0

    arena_root = Path(args.arena) if args.arena else Path(tempfile.mkdtemp(prefix="bench-mem-arena-"))
    results: dict[str, list[tuple[int, int]]] = {mode: [] for mode in args.modes}
    print(f"{'lines':>8} {'mode':>8} {'peak PSS':>10} {'maxrss':>8} {'seconds':>8}  notes")
    ok = True
    for size in args.sizes:
        firehose_root = ensure_day(arena_root / f"day-{size}", DAY, size, seed=0)
        for mode in args.modes:
            r = measure(mode, firehose_root, DAY, args.workers)
            lines = r.get("lines", size)
            results[mode].append((lines, r["peak"]))
            note = f"{r['lines']} lines read" if mode == "core" else \
                f"run {'ok' if r['success'] else 'FAILED'}, conservation {'passed' if r['conserved'] else 'FAILED'}"
            ok &= mode == "core" or (r["success"] and r["conserved"])
            print(f"{size:>8} {mode:>8} {r['peak'] / 1e9:>8.2f}GB {r['maxrss'] / 1e9:>6.2f}GB {r['seconds']:>8.1f}  "
                  f"{note} (after imports {r['after_imports'] / 1e9:.2f} GB)")
    for mode, points in results.items():
        if len(points) >= 2:
            print(f"slope {mode}: {slope_mb_per_100k(points):+.1f} MB per 100k lines "
                  f"(peak {points[0][1] / 1e9:.2f} GB at {points[0][0]} lines, {points[-1][1] / 1e9:.2f} GB at "
                  f"{points[-1][0]})")
        at_100k = [peak for lines, peak in points if 90_000 <= lines <= 110_000]
        if at_100k:
            good = at_100k[0] <= TARGET_BYTES
            ok &= good
            print(f"{'PASS' if good else 'FAIL'}  {mode}: peak memory at 100k lines {at_100k[0] / 1e9:.2f} GB <= 1 GB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
