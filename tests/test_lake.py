"""The lake under concurrency and crashes: readers see one whole version of a day or snapshot,
never a mix and never nothing; concurrent writers all succeed and the last complete one wins;
a killed writer leaves no day missing and its scratch is cleaned at the next start.

Writers and readers are real processes (tests/lake_stress.py); S3 is moto's server on loopback.
"""

from __future__ import annotations

import glob
import io
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import boto3
import duckdb
import lake_stress
import polars as pl
from lake_stress import ASSET, DAY, ROWS_PER_PART, verdict, write_version

from resources.lake import LakeResource

STRESS = Path(lake_stress.__file__)


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(STRESS), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen, timeout: float = 120) -> None:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err.decode()[-3000:]


def start_reader(root: Path, tmp_path: Path, name: str = "reader") -> tuple[subprocess.Popen, Path, Path]:
    out, stop = tmp_path / f"{name}.json", tmp_path / f"{name}.stop"
    proc = start("read", root, "--seconds", 300, "--stop", stop, "--out", out)
    assert proc.stdout.readline() == b"ready\n"
    return proc, out, stop


def stop_reader(reader: tuple[subprocess.Popen, Path, Path]) -> dict:
    proc, out, stop = reader
    stop.touch()
    finish(proc)
    return json.loads(out.read_text())


def assert_clean_reads(tally: dict, min_reads: int = 10) -> None:
    assert tally["reads"] >= min_reads, tally
    assert tally["bad"] == [], f"{len(tally['bad'])} of {tally['reads']} reads saw a mixed or partial day: {tally['bad'][:3]}"
    assert tally["missing"] == 0, f"{tally['missing']} of {tally['reads']} reads found the day missing"
    assert tally["errors"] == [], tally["errors"][:3]


def assert_no_leftovers(lake: LakeResource) -> None:
    """Nothing in staging; after collecting retired versions, only what the pointers name."""
    root = Path(lake.root)
    assert sorted(os.listdir(root / ".staging")) == []
    lake.clean_stale(grace_s=0)
    versions = root / ASSET / ".versions"
    kept = sorted(str(p.relative_to(versions)) for p in versions.glob("*/*"))
    current = sorted(str((root / ASSET / name).resolve().relative_to(versions.resolve()))
                     for name in os.listdir(root / ASSET) if not name.startswith("."))
    assert kept == current


# ---- local folders ---------------------------------------------------------------------------


def test_readers_see_one_whole_version_while_writers_replace_the_day(tmp_path):
    root = tmp_path / "lake"
    lake = LakeResource(root=str(root))
    write_version(lake, "seed.0.p2", 2, tmp_path)
    reader = start_reader(root, tmp_path)
    writers = [start("write", root, "--writer", w, "--count", 12, "--seed", i) for i, w in enumerate("ab")]
    for proc in writers:
        finish(proc)  # concurrent writers of one day: none fails
    tally = stop_reader(reader)

    assert_clean_reads(tally)
    final = lake.read_day(ASSET, DAY)
    assert verdict(final) is None
    assert final["version"][0].split(".")[1] == "11", "the last complete write wins"
    assert_no_leftovers(lake)


def test_a_writer_killed_at_random_points_never_leaves_the_day_missing_or_mixed(tmp_path):
    root = tmp_path / "lake"
    lake = LakeResource(root=str(root))
    write_version(lake, "seed.0.p3", 3, tmp_path)
    reader = start_reader(root, tmp_path)
    rng = random.Random(9)
    for kill in range(3):
        writer = start("write", root, "--writer", f"k{kill}", "--count", 1000, "--seed", kill)
        assert writer.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.2, 1.5))  # it writes all the time: killed at a random point of one
        writer.send_signal(signal.SIGKILL)
        writer.communicate()
        assert verdict(lake.read_day(ASSET, DAY)) is None
    tally = stop_reader(reader)
    assert_clean_reads(tally)
    assert tally["versions"] >= 2, "the reader should have seen the day change"

    removed = lake.clean_stale()  # what the next run does at its start: the dead writers' scratch goes
    assert removed, "killed writers leave scratch behind"
    write_version(lake, "rerun.0.p2", 2, tmp_path)
    assert lake.read_day(ASSET, DAY)["version"][0] == "rerun.0.p2"
    assert_no_leftovers(lake)


def test_stale_scratch_goes_and_a_live_writers_stays(tmp_path):
    root = tmp_path / "lake"
    lake = LakeResource(root=str(root))
    mine = lake.scratch_dir()  # this process is alive: never cleaned
    (mine / "half-written.parquet").write_bytes(b"...")
    code = ("import sys; sys.path.insert(0, sys.argv[2]); from resources.lake import LakeResource; "
            "d = LakeResource(root=sys.argv[1]).scratch_dir(); (d / 'x.parquet').write_bytes(b'x')")
    subprocess.run([sys.executable, "-c", code, str(root), str(Path(__file__).resolve().parents[1])], check=True)
    staging = root / ".staging"
    dead = [p for p in staging.iterdir() if p != mine]
    assert len(dead) == 1
    legacy_old, legacy_new = staging / "scratch-k2j3h4", staging / "gated_traces-abc123"  # names of older code
    for folder in (legacy_old, legacy_new):
        folder.mkdir()
    old = time.time() - 2 * 86400
    os.utime(legacy_old, (old, old))

    removed = lake.clean_stale()

    assert sorted(removed) == sorted(str(p) for p in (dead[0], legacy_old))
    assert sorted(staging.iterdir()) == sorted([mine, legacy_new])
    assert (mine / "half-written.parquet").read_bytes() == b"..."


def test_plain_tools_see_the_current_version_only(tmp_path):
    root = tmp_path / "lake"
    lake = LakeResource(root=str(root), retired_grace_s=3600)  # older versions stay on disk a while
    for tag, parts in (("a.0.p4", 4), ("b.0.p2", 2), ("c.0.p3", 3)):
        write_version(lake, tag, parts, tmp_path)
    lake.write_day(ASSET, "2026-11-29", lake_stress.version_table("d.0.p1", 0))

    pattern = str(root / ASSET / "day=*" / "part-*.parquet")
    assert sorted(Path(p).name for p in glob.glob(pattern)) == [
        "part-00000.parquet", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    rows = duckdb.sql(f"SELECT day, version, count(*) AS n FROM read_parquet('{pattern}', hive_partitioning = true) "
                      "GROUP BY ALL ORDER BY day").fetchall()
    assert [(str(d), v, n) for d, v, n in rows] == [
        ("2026-11-29", "d.0.p1", ROWS_PER_PART), ("2026-11-30", "c.0.p3", 3 * ROWS_PER_PART)]
    assert lake.list_days(ASSET) == ["2026-11-29", "2026-11-30"]
    assert (root / ASSET / f"day={DAY}").is_symlink()


def test_a_plain_day_folder_of_older_code_is_replaced_in_place(tmp_path):
    root = tmp_path / "lake"
    folder = root / ASSET / f"day={DAY}"
    folder.mkdir(parents=True)
    for i in range(3):
        lake_stress.version_table("old.0.p3", i).write_parquet(folder / f"part-{i:05d}.parquet")
    lake = LakeResource(root=str(root), retired_grace_s=0)
    assert lake.read_day(ASSET, DAY)["version"][0] == "old.0.p3"

    write_version(lake, "new.0.p1", 1, tmp_path)

    assert lake.read_day(ASSET, DAY)["version"].unique().to_list() == ["new.0.p1"]
    assert [p.name for p in folder.iterdir()] == ["part-00000.parquet"]
    assert_no_leftovers(lake)


def test_parts_past_99999_are_read_in_part_order(tmp_path):
    folder = tmp_path / ASSET / f"day={DAY}"
    folder.mkdir(parents=True)
    for number, tag in ((100000, "second"), (99999, "first")):
        pl.DataFrame({"version": [tag]}).write_parquet(folder / f"part-{number:05d}.parquet")
    assert LakeResource(root=str(tmp_path)).read_day(ASSET, DAY)["version"].to_list() == ["first", "second"]


def test_a_snapshot_replace_is_atomic_and_plain_readable(tmp_path):
    root = tmp_path / "lake"
    lake = LakeResource(root=str(root))
    table = lake_stress.version_table("s.0.p1", 0)
    lake.write_snapshot("train_corpus", "v1", table, {"rows": table.height})
    lake.write_snapshot("train_corpus", "v1", table, {"rows": table.height, "again": True})

    assert lake.list_snapshots("train_corpus") == ["v1"]
    assert lake.read_manifest("train_corpus", "v1")["again"] is True
    assert sorted(p.name for p in (root / "train_corpus" / "v1").iterdir()) == ["manifest.json", "part-00000.parquet"]
    assert pl.read_parquet(root / "train_corpus" / "v1" / "part-00000.parquet").equals(table)


# ---- S3 (moto's server on loopback) ----------------------------------------------------------


def _s3_lake(moto_s3: str, **fields) -> LakeResource:
    boto3.client("s3", endpoint_url=moto_s3).create_bucket(Bucket="lake")
    return LakeResource(root="s3://lake/prod", endpoint_url=moto_s3, **fields)


def test_s3_readers_see_one_whole_version_while_writers_replace_the_day(moto_s3, tmp_path):
    lake = _s3_lake(moto_s3)
    write_version(lake, "seed.0.p2", 2, tmp_path)
    stop = tmp_path / "stop"
    tallies = []
    reader = threading.Thread(target=lambda: tallies.append(lake_stress.run_reader(
        LakeResource(root=lake.root, endpoint_url=moto_s3), 300, stop)))
    reader.start()
    errors = []

    def write(name: str, seed: int) -> None:
        try:
            lake_stress.run_writer(LakeResource(root=lake.root, endpoint_url=moto_s3), name, 8, seed)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    writers = [threading.Thread(target=write, args=(w, i)) for i, w in enumerate("ab")]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.touch()
    reader.join()

    assert errors == []
    assert_clean_reads(tallies[0], min_reads=5)
    final = lake.read_day(ASSET, DAY)
    assert verdict(final) is None and final["version"][0].split(".")[1] == "7"
    lake.clean_stale(grace_s=0, abandoned_after_s=0)  # every writer is done: nothing is being uploaded
    s3 = boto3.client("s3", endpoint_url=moto_s3)
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="lake", Prefix=f"prod/{ASSET}/")["Contents"])
    parts = int(final["version"][0].rsplit(".p", 1)[1])
    assert len([k for k in keys if k.endswith(".parquet")]) == parts, keys


def test_s3_snapshots_and_a_legacy_day_prefix(moto_s3, tmp_path):
    lake = _s3_lake(moto_s3, retired_grace_s=0)
    s3 = boto3.client("s3", endpoint_url=moto_s3)
    for i in range(2):  # the flat layout of older code: parts right under the day prefix
        s3.put_object(Bucket="lake", Key=f"prod/{ASSET}/day={DAY}/part-{i:05d}.parquet",
                      Body=_pq(lake_stress.version_table("old.0.p2", i)))
    assert verdict(lake.read_day(ASSET, DAY)) is None
    write_version(lake, "new.0.p1", 1, tmp_path)
    assert lake.read_day(ASSET, DAY)["version"].unique().to_list() == ["new.0.p1"]
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="lake", Prefix=f"prod/{ASSET}/day={DAY}/")["Contents"]]
    assert not [k for k in keys if k.endswith(".parquet")], "the flat parts of older code are gone"

    table = lake_stress.version_table("s.0.p1", 0)
    lake.write_snapshot("train_corpus", "v1", table, {"rows": 1})
    lake.write_snapshot("train_corpus", "v1", table, {"rows": 2})
    assert lake.list_snapshots("train_corpus") == ["v1"]
    assert lake.read_manifest("train_corpus", "v1") == {"rows": 2}
    assert lake.read_snapshot("train_corpus", "v1").equals(table)
    assert lake.list_days(ASSET) == [DAY]


def _pq(table: pl.DataFrame) -> bytes:
    sink = io.BytesIO()
    table.write_parquet(sink)
    return sink.getvalue()


def test_a_training_job_lists_the_snapshot_version_it_is_given(moto_s3, tmp_path):
    from shopdistill_assets.training.stages.common import dataset_files

    lake = _s3_lake(moto_s3)
    table = lake_stress.version_table("s.0.p1", 0)
    lake.write_snapshot("sft_rows", "v1", table, {"rows": table.height})

    files = dataset_files(lake.snapshot_version_uri("sft_rows", "v1"), moto_s3, tmp_path)

    assert len(files) == 1 and pl.read_parquet(files[0]).equals(table)
    local = LakeResource(root=str(tmp_path / "lake"))
    local.write_snapshot("sft_rows", "v1", table, {"rows": table.height})
    assert [pl.read_parquet(f).equals(table) for f in dataset_files(local.snapshot_version_uri("sft_rows", "v1"),
                                                                    None, tmp_path)] == [True]
