"""Writers and readers of one lake day, as real processes (the lake tests and benchmarks/lake_crash.py).

    python tests/lake_stress.py write ROOT --writer W --count N [--endpoint-url URL]
    python tests/lake_stress.py read ROOT --seconds S --out FILE [--endpoint-url URL]
    python tests/lake_stress.py tables ROOT --day D --expect LAKE_A --expect LAKE_B --out FILE --stop FILE

Every write is one whole version of the day: 1 to 4 parts, every row tagged with the
version's name, which also says how many rows the version has. A reader that sees rows of two
versions, or fewer rows than the tag says, has seen a mixed or partial day; one that finds
no day after the first write has seen a missing day. The reader writes its tally as JSON.

`tables` reads every table of a day of a corpus lake in a loop while `shopdistill corpus` runs
over it are killed: each read must equal that table as one of the uninterrupted runs wrote it.
`kill_at_random` and `corpus_tables` drive and compare those runs (tests/test_crash.py and
benchmarks/lake_crash.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resources.lake import LakePartMissing, LakeResource  # noqa: E402

ASSET = "gated_traces"
DAY = "2026-11-30"
ROWS_PER_PART = 3000


def version_table(tag: str, part: int) -> pl.DataFrame:
    payload = f"{tag}-{part}-" * 8
    return pl.DataFrame({"version": [tag] * ROWS_PER_PART, "part": [part] * ROWS_PER_PART,
                         "row": list(range(ROWS_PER_PART)), "payload": [payload] * ROWS_PER_PART})


def write_version(lake: LakeResource, tag: str, parts: int, scratch: Path) -> None:
    """One version of the day: through write_day (one part) or write_day_parts (several)."""
    if parts == 1:
        lake.write_day(ASSET, DAY, version_table(tag, 0))
        return
    files = []
    for i in range(parts):
        path = scratch / f"{tag}-{i:05d}.parquet"
        version_table(tag, i).write_parquet(path)
        files.append(path)
    lake.write_day_parts(ASSET, DAY, files)


def tag_for(writer: str, i: int, parts: int) -> str:
    return f"{writer}.{i}.p{parts}"


def verdict(frame: pl.DataFrame) -> str | None:
    """None for one whole version; otherwise what is wrong with what was read."""
    tags = frame["version"].unique().to_list()
    if len(tags) != 1:
        return f"mixed: {sorted(tags)[:4]}"
    parts = int(tags[0].rsplit(".p", 1)[1])
    if frame.height != parts * ROWS_PER_PART or frame["part"].n_unique() != parts:
        return f"partial: {tags[0]} has {frame.height} rows"
    return None


def read_once(lake: LakeResource, how: int) -> pl.DataFrame:
    """The three ways assets read a day, in turn."""
    if how == 0:
        return lake.read_day(ASSET, DAY)
    if how == 1:
        return pl.from_arrow(lake.read_day_columns(ASSET, DAY, ["version", "part"]))
    scratch = lake.scratch_dir()
    try:
        return pl.concat([pl.read_parquet(p, columns=["version", "part"])
                          for p in lake.day_part_files(ASSET, DAY, scratch)])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_writer(lake: LakeResource, writer: str, count: int, seed: int) -> None:
    rng = random.Random(seed)
    scratch = lake.scratch_dir()  # as the assets do: a killed writer leaves it in the lake's staging
    try:
        for i in range(count):
            parts = rng.randint(1, 4)
            write_version(lake, tag_for(writer, i, parts), parts, scratch)
            print(f"wrote {i}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_reader(lake: LakeResource, seconds: float, stop: Path | None = None) -> dict:
    tally = {"reads": 0, "bad": [], "missing": 0, "errors": [], "versions": set()}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (stop and stop.exists()):
        try:
            frame = read_once(lake, tally["reads"] % 3)
        except LakePartMissing:
            tally["missing"] += 1
            continue
        except Exception as exc:  # noqa: BLE001 - the tally is the test's evidence
            tally["errors"].append(f"{type(exc).__name__}: {exc}"[:300])
            continue
        finally:
            tally["reads"] += 1
        problem = verdict(frame)
        if problem:
            tally["bad"].append(problem)
        else:
            tally["versions"].add(frame["version"][0])
    tally["versions"] = len(tally["versions"])
    return tally


# ---- whole corpus runs, killed -----------------------------------------------------------------

def corpus_command(firehose: Path, lake: Path, day: str) -> list[str]:
    cli = Path(sys.executable).with_name("shopdistill")
    return [str(cli), "corpus", "--firehose", str(firehose), "--lake", str(lake), "--day", day]


def start_corpus(firehose: Path, lake: Path, day: str, home: Path) -> subprocess.Popen:
    """`shopdistill corpus` in its own process group (its part workers die with it)."""
    env = {**os.environ, "SHOPDISTILL_HOME": str(home)}
    env.pop("DAGSTER_HOME", None)
    return subprocess.Popen(corpus_command(firehose, lake, day), env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def started_run_ids(instance) -> set[str]:
    import dagster as dg

    records = instance.get_run_records(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
    return {r.dagster_run.run_id for r in records}


def home_instance(home: Path):
    """The project home's Dagster instance, created here before any run so that runs and this
    process do not race to create its SQLite storage."""
    import dagster as dg

    dagster_home = home / "dagster"
    dagster_home.mkdir(parents=True, exist_ok=True)
    if not (dagster_home / "dagster.yaml").exists():
        shutil.copyfile(Path(__file__).resolve().parents[1] / "dagster.yaml", dagster_home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(dagster_home)  # the instance's yaml reads it
    return dg.DagsterInstance.from_config(str(dagster_home))


def kill_at_random(firehose: Path, lake: Path, day: str, home: Path, after_s: float, instance) -> str | None:
    """Run the corpus for `day` and SIGKILL its process group `after_s` seconds after its
    Dagster run started; returns the killed run's id (None where the run ended first)."""
    import dagster as dg

    before = started_run_ids(instance)  # runs killed before are failed once this one starts
    proc = start_corpus(firehose, lake, day, home)
    run_id = None
    while run_id is None and proc.poll() is None:
        run_id = next(iter(started_run_ids(instance) - before), None)
        time.sleep(0.05)
    try:
        proc.wait(timeout=after_s)
        _, err = proc.communicate()
        assert proc.returncode == 0, err.decode()[-3000:]
        return None
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        # The process outlives its run by its teardown: a kill that lands after the run already
        # succeeded killed no run.
        run = instance.get_run_by_id(run_id) if run_id else None
        return None if run is None or run.status == dg.DagsterRunStatus.SUCCESS else run_id


def corpus_tables(lake: Path, day: str) -> dict[str, list[bytes]]:
    """Every table of the day as the contract path shape lists it: asset -> its parts' bytes."""
    return {asset.name: [p.read_bytes() for p in sorted((asset / f"day={day}").glob("part-*.parquet"))]
            for asset in sorted(lake.iterdir()) if (asset / f"day={day}").is_dir()}


def leftovers(lake: Path) -> list[str]:
    """What is on disk beyond the current versions, the asset locks and an empty staging."""
    extra = [str(p) for p in (lake / ".staging").iterdir()] if (lake / ".staging").is_dir() else []
    for asset in lake.iterdir():
        versions = asset / ".versions"
        if asset.name.startswith(".") or not versions.is_dir():
            continue
        current = {(asset / name).resolve() for name in os.listdir(asset) if not name.startswith(".")}
        extra += [str(v) for v in versions.glob("*/*") if v.resolve() not in current]
        extra += [str(p) for p in asset.iterdir() if not p.name.startswith(".") and not p.is_symlink()]
    return sorted(extra)


def run_table_reader(lake: LakeResource, day: str, expected: list[Path], seconds: float,
                     stop: Path | None = None) -> dict:
    options = {}
    for root in expected:
        reference = LakeResource(root=str(root))
        for asset in corpus_tables(root, day):
            options.setdefault(asset, []).append(reference.read_day(asset, day))
    tally = {"reads": 0, "bad": [], "missing": 0, "errors": [], "tables": len(options)}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (stop and stop.exists()):
        for asset, frames in options.items():
            tally["reads"] += 1
            try:
                frame = lake.read_day(asset, day)
            except LakePartMissing:
                tally["missing"] += 1
                continue
            except Exception as exc:  # noqa: BLE001 - the tally is the test's evidence
                tally["errors"].append(f"{asset}: {type(exc).__name__}: {exc}"[:300])
                continue
            if not any(frame.equals(f) for f in frames):
                tally["bad"].append(f"{asset}: {frame.height} rows match no uninterrupted run")
        time.sleep(0.2)  # leave the machine's cores to the runs being killed
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["write", "read", "tables"])
    parser.add_argument("root")
    parser.add_argument("--endpoint-url")
    parser.add_argument("--writer", default="w")
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--stop", help="stop reading when this file appears")
    parser.add_argument("--out")
    parser.add_argument("--day", default=DAY)
    parser.add_argument("--expect", action="append", default=[], help="a lake an uninterrupted run wrote")
    args = parser.parse_args(argv)
    lake = LakeResource(root=args.root, endpoint_url=args.endpoint_url)
    print("ready", flush=True)  # imports done: the caller may time its kill from here
    if args.mode == "write":
        run_writer(lake, args.writer, args.count, args.seed)
        return 0
    stop = Path(args.stop) if args.stop else None
    if args.mode == "tables":
        tally = run_table_reader(lake, args.day, [Path(e) for e in args.expect], args.seconds, stop)
    else:
        tally = run_reader(lake, args.seconds, stop)
    Path(args.out).write_text(json.dumps(tally))
    return 0


if __name__ == "__main__":
    sys.exit(main())
