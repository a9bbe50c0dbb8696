"""Writers and readers of one lake day, as real processes (the lake tests and benchmarks/lake_crash.py).

    python tests/lake_stress.py write ROOT --writer W --count N [--endpoint-url URL]
    python tests/lake_stress.py read ROOT --seconds S --out FILE [--endpoint-url URL]

Every write is one whole version of the day: 1 to 4 parts, every row tagged with the
version's name, which also says how many rows the version has. A reader that sees rows of two
versions, or fewer rows than the tag says, has seen a mixed or partial day; one that finds
no day after the first write has seen a missing day. The reader writes its tally as JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["write", "read"])
    parser.add_argument("root")
    parser.add_argument("--endpoint-url")
    parser.add_argument("--writer", default="w")
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--stop", help="stop reading when this file appears")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    lake = LakeResource(root=args.root, endpoint_url=args.endpoint_url)
    print("ready", flush=True)  # imports done: the caller may time its kill from here
    if args.mode == "write":
        run_writer(lake, args.writer, args.count, args.seed)
        return 0
    tally = run_reader(lake, args.seconds, Path(args.stop) if args.stop else None)
    Path(args.out).write_text(json.dumps(tally))
    return 0


if __name__ == "__main__":
    sys.exit(main())
