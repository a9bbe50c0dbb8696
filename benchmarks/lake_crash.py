"""The lake under kills, heavier than tests/test_crash.py, and what the atomic layout costs.

    python benchmarks/lake_crash.py [--kills 12] [--traces 600] [--seed 0] [--skip-crash]

(1) Crash stress: two simulated inputs A and B of one day, each run once uninterrupted; then
    `shopdistill corpus` over one lake, alternating B and A, SIGKILLed (whole process group)
    `--kills` times at random points of its Dagster run while a reader process reads every
    table of the day; then one rerun with A. Prints the reads, mixed and missing reads (must be
    0), whether the rerun is byte-identical to A's uninterrupted lake, killed runs left STARTED
    (must be 0) and leftovers after collecting retired versions (must be none).
(2) Overhead, in this process, median of 5 paired rounds: reading a day through its pointer (resolve once,
    then read) against reading the same part files directly; a replace (stage, rename, swap,
    collect) against writing the same Parquet bytes to a file.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import lake_stress  # noqa: E402
import polars as pl  # noqa: E402

from resources.lake import LakeResource, parquet_bytes  # noqa: E402
from shopdistill_assets.cli.commands import main as cli  # noqa: E402

DAY = "2026-11-05"


def crash(work: Path, kills: int, traces: int, seed: int) -> dict:
    inputs = {}
    for k, s in (("a", seed + 1), ("b", seed + 2)):
        cli(["simulate", "--out", str(work / f"arena-{k}"), "--start-day", DAY, "--days", "1",
             "--traces-per-day", str(traces), "--seed", str(s)])
        inputs[k] = work / f"arena-{k}" / "firehose"
    for k, firehose in inputs.items():
        proc = lake_stress.start_corpus(firehose, work / f"lake-{k}", DAY, work / f"home-{k}")
        _, err = proc.communicate()
        assert proc.returncode == 0, err.decode()[-2000:]
    (record,) = lake_stress.home_instance(work / "home-a").get_run_records()
    run_s = record.end_time - record.start_time
    lake, home = work / "lake", work / "home"
    shutil.copytree(work / "lake-a", lake, symlinks=True)
    stop, out = work / "stop", work / "reads.json"
    reader = subprocess.Popen([sys.executable, lake_stress.__file__, "tables", str(lake), "--day", DAY,
                               "--expect", str(work / "lake-a"), "--expect", str(work / "lake-b"),
                               "--seconds", "100000", "--stop", str(stop), "--out", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert reader.stdout.readline() == b"ready\n"
    instance = lake_stress.home_instance(home)
    rng = random.Random(seed)
    killed = [lake_stress.kill_at_random(inputs["b" if k % 2 == 0 else "a"], lake, DAY, home,
                                         rng.uniform(0.02, 0.98) * run_s, instance) for k in range(kills)]
    rerun = lake_stress.start_corpus(inputs["a"], lake, DAY, home)
    _, err = rerun.communicate()
    assert rerun.returncode == 0, err.decode()[-2000:]
    staging = sorted(p.name for p in (lake / ".staging").iterdir())
    stop.touch()
    reader.communicate()
    tally = json.loads(out.read_text())
    statuses = [str(r.dagster_run.status.value) for r in instance.get_run_records()]
    LakeResource(root=str(lake)).clean_stale(grace_s=0)
    return {"run_s": round(run_s, 2), "kills": kills, "killed_in_run": sum(k is not None for k in killed),
            "table_reads": tally["reads"], "tables": tally["tables"], "mixed": len(tally["bad"]),
            "missing": tally["missing"], "read_errors": len(tally["errors"]),
            "rerun_identical": lake_stress.corpus_tables(lake, DAY) == lake_stress.corpus_tables(work / "lake-a", DAY),
            "left_started": statuses.count("STARTED"), "failed_runs": statuses.count("FAILURE"),
            "staging_after_rerun": staging, "leftovers": lake_stress.leftovers(lake)}


def ratio(candidate, baseline, repeats: int = 5) -> float:
    """Median over `repeats` of candidate time / baseline time, the two run back to back each
    round (load from others affects both alike)."""
    ratios = []
    for _ in range(repeats):
        start = time.perf_counter()
        candidate()
        middle = time.perf_counter()
        baseline()
        ratios.append((middle - start) / (time.perf_counter() - middle))
    return round(statistics.median(ratios), 3)


def overhead(work: Path) -> dict:
    lake = LakeResource(root=str(work / "overhead"), retired_grace_s=0)
    rng = random.Random(0)  # incompressible payload: a part of some MB, as a day's part is
    table = pl.DataFrame({"trace_id": [f"t{i}" for i in range(200_000)],
                          "payload": [rng.randbytes(32).hex() for _ in range(200_000)]})
    lake.write_day("gated_traces", DAY, table)
    parts = [Path(u) for u in lake.day_part_uris("gated_traces", DAY)]
    plain = work / "plain.parquet"
    return {
        "rows": table.height, "part_mb": round(parts[0].stat().st_size / 1e6, 2),
        # resolve the pointer, read, check: against pl.read_parquet of the same file
        "read_day_vs_direct": ratio(lambda: [lake.read_day("gated_traces", DAY) for _ in range(10)],
                                    lambda: [pl.read_parquet(parts[0]) for _ in range(10)]),
        # encode, stage, fsync, rename, swap the link, collect: against encode + write a file
        "write_day_vs_plain_write": ratio(lambda: [lake.write_day("gated_traces", DAY, table) for _ in range(3)],
                                          lambda: [plain.write_bytes(parquet_bytes(table)) for _ in range(3)]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=12)
    parser.add_argument("--traces", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-crash", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lake-crash-") as tmp:
        work = Path(tmp)
        print("overhead:", json.dumps(overhead(work)))
        if args.skip_crash:
            return 0
        result = crash(work, args.kills, args.traces, args.seed)
        print("crash:", json.dumps(result))
    ok = (result["mixed"] == result["missing"] == result["read_errors"] == result["left_started"] == 0
          and result["rerun_identical"] and not result["leftovers"] and not result["staging_after_rerun"])
    print("verdict:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
