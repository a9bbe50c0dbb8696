"""raw_firehose, the firehose resource and the lake, on local folders and on S3 (moto server)."""

from __future__ import annotations

import gzip
import hashlib
import os
import random
import zlib
from pathlib import Path

import boto3
import dagster as dg
import polars as pl
import pytest
import zstandard

from resources.firehose import FirehoseDayMissing, FirehoseResource
from resources.lake import LakePartMissing, LakeResource
from resources.s3 import parse_s3_uri
from shopdistill_assets.ingest.assets import raw_firehose


def expected_day_version(stored: dict[str, bytes]) -> str:
    """The contract, restated: sha256 over sorted `name \\x1f sha256(stored bytes) \\n`."""
    pairs = sorted((name, hashlib.sha256(data).hexdigest()) for name, data in stored.items())
    return hashlib.sha256("".join(f"{n}\x1f{h}\n" for n, h in pairs).encode()).hexdigest()


def materialize_day(day: str, firehose: FirehoseResource, lake: LakeResource, **kwargs):
    return dg.materialize(
        [raw_firehose],
        partition_key=day,
        resources={"firehose": firehose, "lake": lake},
        instance=dg.DagsterInstance.ephemeral(),
        **kwargs,
    )


def only_materialization(result: dg.ExecuteInProcessResult) -> dg.AssetMaterialization:
    (materialization,) = result.asset_materializations_for_node("raw_firehose")
    return materialization


def many_lines(n: int = 20_000) -> list[bytes]:
    """Varied JSON lines (~2 MB) so streams cross many read chunks and compress unevenly."""
    rng = random.Random(7)
    return [
        f'{{"problem_id": "p-{i}", "query": "{rng.getrandbits(256):064x}"}}\n'.encode()
        for i in range(n)
    ]


# ---- raw_firehose on a local folder ----------------------------------------------------------


def test_raw_firehose_inventories_a_local_day(tiny_day, tmp_path):
    firehose = FirehoseResource(root=str(tiny_day.root))
    lake = LakeResource(root=str(tmp_path / "lake"))

    result = materialize_day(tiny_day.day, firehose, lake)

    assert result.success
    inventory = lake.read_day("raw_firehose", tiny_day.day)
    assert inventory.columns == ["file", "uri", "size_bytes", "sha256", "compression"]
    assert inventory["file"].to_list() == ["part-000.jsonl.gz", "part-001.jsonl"]
    assert inventory["compression"].to_list() == ["gzip", "none"]
    for row in inventory.iter_rows(named=True):
        data = tiny_day.stored[row["file"]]
        assert row["size_bytes"] == len(data) == os.path.getsize(tiny_day.folder / row["file"])
        assert row["sha256"] == hashlib.sha256(data).hexdigest()
        assert Path(row["uri"]) == (tiny_day.folder / row["file"]).resolve()

    materialization = only_materialization(result)
    assert materialization.tags["dagster/data_version"] == expected_day_version(tiny_day.stored)
    assert materialization.metadata["dagster/row_count"].value == 2
    assert materialization.metadata["total_bytes"].value == sum(map(len, tiny_day.stored.values()))
    assert materialization.metadata["firehose_root"].value == str(tiny_day.root)
    assert "| `part-001.jsonl` |" in materialization.metadata["files"].value
    part = tmp_path / "lake" / "raw_firehose" / f"day={tiny_day.day}" / "part-00000.parquet"
    assert part.is_file()


def test_rematerializing_a_day_gives_identical_bytes_and_version(tiny_day, tmp_path):
    firehose = FirehoseResource(root=str(tiny_day.root))
    lake = LakeResource(root=str(tmp_path / "lake"))
    part = tmp_path / "lake" / "raw_firehose" / f"day={tiny_day.day}" / "part-00000.parquet"

    first = only_materialization(materialize_day(tiny_day.day, firehose, lake))
    first_bytes = part.read_bytes()
    second = only_materialization(materialize_day(tiny_day.day, firehose, lake))

    assert part.read_bytes() == first_bytes
    assert second.tags["dagster/data_version"] == first.tags["dagster/data_version"]
    assert sorted(p.name for p in part.parent.iterdir()) == ["part-00000.parquet"]
    assert list((tmp_path / "lake" / ".staging").iterdir()) == []


def test_a_reuploaded_file_changes_the_data_version(tiny_day, tmp_path):
    firehose = FirehoseResource(root=str(tiny_day.root))
    lake = LakeResource(root=str(tmp_path / "lake"))
    before = only_materialization(materialize_day(tiny_day.day, firehose, lake))

    reuploaded = tiny_day.stored["part-001.jsonl"] + b"{}\n"
    (tiny_day.folder / "part-001.jsonl").write_bytes(reuploaded)
    after = only_materialization(materialize_day(tiny_day.day, firehose, lake))

    changed = dict(tiny_day.stored, **{"part-001.jsonl": reuploaded})
    assert after.tags["dagster/data_version"] == expected_day_version(changed)
    assert after.tags["dagster/data_version"] != before.tags["dagster/data_version"]


def test_a_missing_day_fails_with_a_clear_message(tiny_day, tmp_path):
    firehose = FirehoseResource(root=str(tiny_day.root))
    lake = LakeResource(root=str(tmp_path / "lake"))

    result = materialize_day("2026-11-29", firehose, lake, raise_on_error=False)

    assert not result.success
    (failure,) = result.get_step_failure_events()
    description = failure.step_failure_data.user_failure_data.description
    assert "no firehose files for day 2026-11-29" in description
    assert str(tiny_day.root / "day=2026-11-29") in description
    assert not lake.has_day("raw_firehose", "2026-11-29")


# ---- raw_firehose and the lake on S3 (moto's HTTP server on loopback) -----------------------


def upload_day(endpoint: str, tiny_day, bucket: str, prefix: str) -> None:
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket=bucket)
    for name, data in tiny_day.stored.items():
        client.put_object(Bucket=bucket, Key=f"{prefix}/day={tiny_day.day}/{name}", Body=data)
    # Neither a day file nor in the day folder itself: both ignored, as a local glob would.
    client.put_object(Bucket=bucket, Key=f"{prefix}/day={tiny_day.day}/notes.txt", Body=b"x")
    client.put_object(Bucket=bucket, Key=f"{prefix}/day={tiny_day.day}/old/a.jsonl", Body=b"{}")


def test_raw_firehose_from_s3_into_an_s3_lake(moto_s3, tiny_day):
    upload_day(moto_s3, tiny_day, "arena", "firehose")
    boto3.client("s3", endpoint_url=moto_s3).create_bucket(Bucket="lake")
    firehose = FirehoseResource(root="s3://arena/firehose", endpoint_url=moto_s3)
    lake = LakeResource(root="s3://lake/v1", endpoint_url=moto_s3)

    result = materialize_day(tiny_day.day, firehose, lake)

    assert result.success
    inventory = lake.read_day("raw_firehose", tiny_day.day)
    assert inventory["file"].to_list() == ["part-000.jsonl.gz", "part-001.jsonl"]
    assert inventory["uri"].to_list() == [
        f"s3://arena/firehose/day={tiny_day.day}/part-000.jsonl.gz",
        f"s3://arena/firehose/day={tiny_day.day}/part-001.jsonl",
    ]
    assert inventory["size_bytes"].to_list() == [len(d) for d in tiny_day.stored.values()]
    assert inventory["sha256"].to_list() == [
        hashlib.sha256(d).hexdigest() for d in tiny_day.stored.values()
    ]
    materialization = only_materialization(result)
    assert materialization.tags["dagster/data_version"] == expected_day_version(tiny_day.stored)


def test_s3_lake_rewrite_is_identical_and_drops_stale_parts(moto_s3, tiny_day):
    upload_day(moto_s3, tiny_day, "arena", "firehose")
    client = boto3.client("s3", endpoint_url=moto_s3)
    client.create_bucket(Bucket="lake")
    firehose = FirehoseResource(root="s3://arena/firehose", endpoint_url=moto_s3)
    lake = LakeResource(root="s3://lake", endpoint_url=moto_s3, retired_grace_s=0)
    prefix = f"raw_firehose/day={tiny_day.day}/"

    def current_parts() -> list[bytes]:
        return [client.get_object(Bucket="lake", Key=parse_s3_uri(uri)[1])["Body"].read()
                for uri in lake.day_part_uris("raw_firehose", tiny_day.day)]

    materialize_day(tiny_day.day, firehose, lake)
    first = current_parts()
    client.put_object(Bucket="lake", Key=prefix + "part-00001.parquet", Body=b"stale")  # the flat layout of older code
    materialize_day(tiny_day.day, firehose, lake)

    keys = [o["Key"] for o in client.list_objects_v2(Bucket="lake", Prefix=prefix)["Contents"]]
    assert keys == [prefix + "_current.json"]
    assert current_parts() == first and len(first) == 1
    versions = client.list_objects_v2(Bucket="lake", Prefix=f"raw_firehose/.versions/day={tiny_day.day}/")["Contents"]
    assert len({o["Key"].rsplit("/", 2)[1] for o in versions}) == 1, "the replaced version is collected"


def test_s3_day_files_open_decompressed_and_a_missing_day_is_named(moto_s3, tiny_day):
    upload_day(moto_s3, tiny_day, "arena", "firehose")
    firehose = FirehoseResource(root="s3://arena/firehose/", endpoint_url=moto_s3)

    for file in firehose.list_day(tiny_day.day):
        with firehose.open_day_file(file) as stream:
            assert list(stream) == tiny_day.lines[file.name]
        assert firehose.file_sha256(file) == hashlib.sha256(tiny_day.stored[file.name]).hexdigest()
    with pytest.raises(FirehoseDayMissing, match=r"s3://arena/firehose/day=2026-11-29/"):
        firehose.list_day("2026-11-29")


# ---- decompression --------------------------------------------------------------------------

COMPRESSORS = {
    "x.jsonl.gz": lambda data: gzip.compress(data, mtime=0),
    "x.jsonl.zst": lambda data: zstandard.ZstdCompressor().compress(data),
    "x.jsonl": lambda data: data,
}


def day_with(tmp_path: Path, name: str, stored: bytes) -> FirehoseResource:
    """A firehose root holding one day of one file."""
    root = tmp_path / f"one-file-{name}"
    (root / "day=2026-11-30").mkdir(parents=True)
    (root / "day=2026-11-30" / name).write_bytes(stored)
    return FirehoseResource(root=str(root))


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_day_files_stream_decompressed_lines(tmp_path, name):
    lines = many_lines()
    firehose = day_with(tmp_path, name, COMPRESSORS[name](b"".join(lines)))

    (file,) = firehose.list_day("2026-11-30")
    with firehose.open_day_file(file) as stream:
        assert list(stream) == lines


@pytest.mark.parametrize("name", ["x.jsonl.gz", "x.jsonl.zst"])
def test_concatenated_gzip_members_and_zstd_frames_read_through(tmp_path, name):
    lines = many_lines(3000)
    stored = b"".join(COMPRESSORS[name](b"".join(lines[i : i + 1000])) for i in (0, 1000, 2000))
    firehose = day_with(tmp_path, name, stored)

    (file,) = firehose.list_day("2026-11-30")
    with firehose.open_day_file(file) as stream:
        assert list(stream) == lines


def intact_line_count(name: str, cut: bytes) -> int:
    """Complete lines a one-shot decompressor recovers from a truncated file."""
    if name.endswith(".gz"):
        recovered = zlib.decompressobj(wbits=31).decompress(cut)
    else:
        recovered = zstandard.ZstdDecompressor().decompressobj().decompress(cut)
    return recovered.count(b"\n")


@pytest.mark.parametrize("name", ["x.jsonl.gz", "x.jsonl.zst"])
def test_a_truncated_file_yields_every_intact_line_then_raises(tmp_path, name):
    lines = many_lines()
    stored = COMPRESSORS[name](b"".join(lines))
    cut = stored[: len(stored) * 6 // 10]
    firehose = day_with(tmp_path, name, cut)

    (file,) = firehose.list_day("2026-11-30")
    read: list[bytes] = []
    with pytest.raises(EOFError), firehose.open_day_file(file) as stream:
        read.extend(stream)
    assert len(read) == intact_line_count(name, cut) > len(lines) // 2
    assert read == lines[: len(read)]


def test_a_truncated_gzip_of_the_sample_lines(tiny_day, tmp_path):
    stored = tiny_day.stored["part-000.jsonl.gz"]
    cut = stored[: len(stored) * 8 // 10]
    firehose = day_with(tmp_path, "cut.jsonl.gz", cut)

    (file,) = firehose.list_day("2026-11-30")
    read: list[bytes] = []
    with pytest.raises(EOFError), firehose.open_day_file(file) as stream:
        read.extend(stream)
    assert len(read) == intact_line_count("cut.jsonl.gz", cut) >= 1
    assert read == tiny_day.lines["part-000.jsonl.gz"][: len(read)]


def test_listing_keeps_only_day_files_sorted(tmp_path):
    folder = tmp_path / "day=2026-11-30"
    (folder / "nested").mkdir(parents=True)
    for name in ["b.jsonl", "a.jsonl.zst", "c.jsonl.gz", "notes.txt", ".up.jsonl.gz", ".jsonl"]:
        (folder / name).write_bytes(b"{}\n")
    (folder / "nested" / "d.jsonl").write_bytes(b"{}\n")
    firehose = FirehoseResource(root=str(tmp_path))

    files = firehose.list_day("2026-11-30")

    assert [(f.name, f.compression, f.size_bytes) for f in files] == [
        ("a.jsonl.zst", "zstd", 3),
        ("b.jsonl", "none", 3),
        ("c.jsonl.gz", "gzip", 3),
    ]


def test_a_day_folder_without_day_files_is_missing(tmp_path):
    (tmp_path / "day=2026-11-30").mkdir()
    (tmp_path / "day=2026-11-30" / "README.txt").write_text("not a day file")
    with pytest.raises(FirehoseDayMissing, match="no firehose files for day 2026-11-30"):
        FirehoseResource(root=str(tmp_path)).list_day("2026-11-30")


@pytest.mark.parametrize("day", ["2026-11-31", "2026-1-30", "../2026-11-30", "", "20261130"])
def test_a_day_that_is_not_a_date_is_refused(tmp_path, day):
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        FirehoseResource(root=str(tmp_path)).list_day(day)


@pytest.mark.parametrize(
    ("uri", "parsed"),
    [
        ("s3://arena/firehose", ("arena", "firehose")),
        ("s3://arena/a/b/", ("arena", "a/b")),
        ("s3://arena", ("arena", "")),
        ("s3://arena/", ("arena", "")),
    ],
)
def test_parse_s3_uri(uri, parsed):
    assert parse_s3_uri(uri) == parsed


@pytest.mark.parametrize("uri", ["arena/firehose", "s3:///firehose", "S3://arena", "/tmp/x"])
def test_parse_s3_uri_refuses_non_s3(uri):
    with pytest.raises(ValueError):
        parse_s3_uri(uri)


# ---- the lake -------------------------------------------------------------------------------

TRACES = pl.DataFrame(
    {
        "trace_id": ["t_1", "t_2", "t_3"],
        "score": [1.0, None, 0.0],
        "messages": ['[{"role": "user"}]', "[]", None],
    }
)


def test_the_same_table_writes_the_same_bytes(tmp_path):
    paths = [
        LakeResource(root=str(tmp_path / lake)).write_day("normalized_traces", "2026-11-30", TRACES)
        for lake in ("a", "b")
    ]
    first, second = (Path(p).read_bytes() for p in paths)
    assert first == second
    assert LakeResource(root=str(tmp_path / "a")).read_day(
        "normalized_traces", "2026-11-30"
    ).equals(TRACES)


def test_write_day_replaces_the_whole_day(tmp_path):
    lake = LakeResource(root=str(tmp_path))
    lake.write_day("gated_traces", "2026-11-30", TRACES)
    stray = tmp_path / "gated_traces" / "day=2026-11-30" / "part-00001.parquet"
    stray.write_bytes(b"left by an older writer")

    lake.write_day("gated_traces", "2026-11-30", TRACES.head(1))

    assert lake.read_day("gated_traces", "2026-11-30")["trace_id"].to_list() == ["t_1"]
    assert not stray.exists()
    assert lake.list_days("gated_traces") == ["2026-11-30"]
    assert list((tmp_path / ".staging").iterdir()) == []


def test_reading_an_absent_day_is_a_clear_error(tmp_path):
    lake = LakeResource(root=str(tmp_path))
    assert not lake.has_day("gated_traces", "2026-11-30")
    with pytest.raises(LakePartMissing, match="no gated_traces for day 2026-11-30"):
        lake.read_day("gated_traces", "2026-11-30")


@pytest.mark.parametrize("asset", ["../etc", "a/b", "", "day=2026-11-30", ".staging"])
def test_lake_names_cannot_escape_their_folder(tmp_path, asset):
    with pytest.raises(ValueError, match="invalid lake asset"):
        LakeResource(root=str(tmp_path)).write_day(asset, "2026-11-30", TRACES)


def check_snapshots(lake: LakeResource) -> None:
    lake.write_day("train_corpus", "2026-11-30", TRACES)  # a day folder is not a snapshot
    lake.write_snapshot("train_corpus", "v0002", TRACES.head(2), {"days": ["2026-11-30"]})
    lake.write_snapshot("train_corpus", "v0001", TRACES, {"days": [], "rows": 3})

    assert lake.list_snapshots("train_corpus") == ["v0001", "v0002"]
    assert lake.read_snapshot("train_corpus", "v0002").equals(TRACES.head(2))
    assert lake.read_manifest("train_corpus", "v0001") == {"days": [], "rows": 3}
    with pytest.raises(LakePartMissing, match="v0003"):
        lake.read_manifest("train_corpus", "v0003")


def test_snapshots_in_a_local_lake(tmp_path):
    lake = LakeResource(root=str(tmp_path))
    check_snapshots(lake)
    manifest = (tmp_path / "train_corpus" / "v0001" / "manifest.json").read_text()
    assert manifest == '{\n  "days": [],\n  "rows": 3\n}\n'


def test_snapshots_and_days_in_an_s3_lake(moto_s3):
    boto3.client("s3", endpoint_url=moto_s3).create_bucket(Bucket="lake")
    lake = LakeResource(root="s3://lake/prod", endpoint_url=moto_s3)
    check_snapshots(lake)
    assert lake.list_days("train_corpus") == ["2026-11-30"]
    day_folder = lake.day_path("train_corpus", "2026-11-30")
    assert day_folder == "s3://lake/prod/train_corpus/day=2026-11-30"
    with pytest.raises(LakePartMissing):
        lake.read_day("train_corpus", "2026-11-29")
