"""Hostile input on the corpus path (issue 10): nothing lost, nothing stalls, bounded memory.

Each test builds the smallest day that shows one fault and runs the real path on it: the
Dagster assets (raw_firehose, the corpus step, the blocking conservation check) where the
fault is about the day, the core functions where it is about one line or one file.
"""

from __future__ import annotations

import gzip
import os
import time
import tracemalloc
import zlib
from pathlib import Path

import dagster as dg
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from conftest import real_sample_lines

from resources.firehose import FirehoseResource
from resources.lake import LakeResource
from shopdistill_assets.corpus.assets import CORPUS_ASSETS, CORPUS_CHECKS
from shopdistill_assets.corpus.dialects import MAX_QUERY_CHARS, MAX_STEPS, MAX_TOOL_CALLS
from shopdistill_assets.corpus.dialects.dialogue import _Dialogue
from shopdistill_assets.corpus.normalize import normalize_record
from shopdistill_assets.ingest.assets import raw_firehose

DAY = "2026-11-30"
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
TABLES = ("gated_traces", "subtask_traces", "rejected_traces")


def write_day(root: Path, files: dict[str | bytes, bytes]) -> Path:
    folder = root / f"day={DAY}"
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        # A bytes name is written as those bytes: how a name that is not UTF-8 gets on disk.
        path = os.path.join(os.fsencode(folder), name) if isinstance(name, bytes) else folder / name
        with open(path, "wb") as out:
            out.write(data)
    return root


def run_day(tmp_path: Path, files: dict[str | bytes, bytes]):
    firehose = FirehoseResource(root=str(write_day(tmp_path / "firehose", files)))
    lake = LakeResource(root=str(tmp_path / "lake"))
    result = dg.materialize([raw_firehose, *CORPUS_ASSETS, *CORPUS_CHECKS], partition_key=DAY,
                            resources={"firehose": firehose, "lake": lake}, instance=dg.DagsterInstance.ephemeral(),
                            run_config=QUIET, raise_on_error=False)
    return result, lake


def conserved(result) -> bool:
    evaluations = [e for e in result.get_asset_check_evaluations() if e.check_name == "conservation"]
    return bool(evaluations) and all(e.passed for e in evaluations)


def fates(lake: LakeResource, source_file: str) -> list[tuple[int, str]]:
    """(line, table or ledger reason) of every unit of one file, by line."""
    out = []
    for table in TABLES:
        df = lake.read_day(table, DAY).filter(pl.col("source_file") == source_file)
        reasons = df["reason"].to_list() if table == "rejected_traces" else [table] * df.height
        out += zip(df["source_line"].to_list(), reasons)
    return sorted(out)


def good() -> bytes:
    """The shared samples' first four lines: two gated, one subtask, one reasoning_gate."""
    return b"".join(real_sample_lines()[:4])


# ---- item 1: a corrupt .jsonl.zst and a name that is not UTF-8 ---------------------------------


def test_a_corrupt_zstd_file_costs_ledger_rows_not_the_day(tmp_path):
    frame = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(good()))
    frame[len(frame) // 2] ^= 0xFF
    result, lake = run_day(tmp_path, {"good.jsonl.gz": gzip.compress(good(), mtime=0), "bad.jsonl.zst": bytes(frame)})

    assert result.success and conserved(result)
    bad = fates(lake, "bad.jsonl.zst")
    assert bad and {reason for _, reason in bad} == {"corrupt_file"}
    assert [line for line, _ in bad] == list(range(1, len(bad) + 1))
    assert len(fates(lake, "good.jsonl.gz")) == 4


def test_a_file_name_that_is_not_utf8_is_read_under_a_safe_name(tmp_path):
    result, lake = run_day(tmp_path, {b"part-\xff\xfe.jsonl": good(), "part-ok.jsonl": b"".join(real_sample_lines()[5:6])})

    assert result.success and conserved(result)
    safe = "non-utf8/part-\\xff\\xfe.jsonl"  # no listed name has a "/": this one cannot collide
    assert lake.read_day("raw_firehose", DAY)["file"].to_list() == [safe, "part-ok.jsonl"]
    assert fates(lake, safe) == [(1, "gated_traces"), (2, "gated_traces"), (3, "subtask_traces"),
                                 (4, "reasoning_gate")]
    assert fates(lake, "part-ok.jsonl") == [(1, "failed_run")]


# ---- item 2: per-line work is linear and bounded ---------------------------------------------------


def test_a_repeated_tool_call_id_costs_linear_time():
    convo = _Dialogue(None, "q")
    start = time.perf_counter()
    ids = [convo.call_id("dup", 0, k) for k in range(20_000)]
    elapsed = time.perf_counter() - start
    assert ids[:3] == ["dup", "dup_2", "dup_3"] and ids[-1] == "dup_20000" and len(set(ids)) == len(ids)
    assert elapsed < 2.0, f"20,000 repeats of one id took {elapsed:.1f} s: quadratic again"
    convo.ids.add("x_2")  # a record may hold a suffixed id itself: it is skipped, not reused
    assert [convo.call_id("x", 0, k) for k in range(3)] == ["x", "x_3", "x_4"]


def primary_record() -> dict:
    return orjson.loads(real_sample_lines()[0])


def _reason(obj) -> str | None:
    out = normalize_record(obj, day=DAY, source_file="f", source_line=1)
    return out.reason if not isinstance(out, dict) else None


def test_records_over_the_work_limits_are_rejected_over_limit():
    rec = primary_record()
    step = rec["dialogue"][0]
    many_steps = {**rec, "dialogue": [step] * (MAX_STEPS + 1)}
    call = step["completion"]["message"]["tool_call"][0]
    crowded = orjson.loads(orjson.dumps(step))
    crowded["completion"]["message"]["tool_call"] = [call] * (MAX_TOOL_CALLS + 1)  # one id, repeated
    long_query = {**rec, "problem": {**rec["problem"], "query": "q" * (MAX_QUERY_CHARS + 1)}}
    chatty = {"messages": [{"role": "user", "content": "hi"}] * 1025}
    for record in (many_steps, {**rec, "dialogue": [crowded]}, long_query, chatty):
        start = time.perf_counter()
        assert _reason(record) == "over_limit"
        assert time.perf_counter() - start < 1.0
    assert _reason({**rec, "dialogue": [step] * MAX_STEPS}) is None  # at the limit: a trace


# ---- item 6: memory does not grow with what a line or a file holds -------------------------------


def _gzip_stream(path: Path, pieces) -> None:
    with gzip.GzipFile(path, "wb", compresslevel=1, mtime=0) as out:
        for piece in pieces:
            out.write(piece)


def test_an_oversize_line_is_never_held_in_memory(tmp_path):
    """A 50 MB query (and a 120 MB line) is counted past the limit, never materialized."""
    from shopdistill_assets.corpus.corpus_parts import oversize_ledger_row
    from shopdistill_assets.corpus.lines import LineReader, OversizeLine

    def read_units(name, chunks, day):  # a line's number, or an oversize line's ledger row
        reader = LineReader(chunks)
        for item in reader:
            yield (oversize_ledger_row(item, day=day, source_file=name, source_line=reader.lines)
                   if isinstance(item, OversizeLine) else (name, reader.lines))

    head = b'{"schema": "sn15.problem_run/v1", "eval_run_id": "r", "problem": {"query": "'
    path = tmp_path / "big.jsonl.gz"
    _gzip_stream(path, [good()[:good().index(b"\n") + 1], head, *(b"q" * (1 << 20) for _ in range(50)), b'"}}\n',
                        *(b"x" * (1 << 20) for _ in range(120)), b"\n", good()[:good().index(b"\n") + 1]])
    firehose = FirehoseResource(root=str(tmp_path))
    from resources.firehose import FirehoseFile

    file = FirehoseFile(name="big.jsonl.gz", uri=str(path), size_bytes=path.stat().st_size)
    tracemalloc.start()
    try:
        units = list(read_units(file.name, firehose.day_file_chunks(file), DAY))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [u[1] if isinstance(u, tuple) else (u["source_line"], u["reason"]) for u in units] == [
        1, (2, "line_too_large"), (3, "line_too_large"), 4]
    assert units[1]["detail"].startswith(f"{len(head) + 50 * (1 << 20) + 3} bytes > ")
    assert units[1]["raw_line"].startswith(head.decode()) and len(units[1]["raw_line"]) == 64 * 1024
    assert peak < 40 * 2**20, f"peak {peak / 2**20:.0f} MiB reading a file with 50 MB and 120 MB lines"


def test_rejected_lines_are_streamed_to_the_ledger_not_held(tmp_path):
    """2,000 rejected lines of 60 KB (120 MB of raw text kept in the ledger): bounded memory."""
    from shopdistill_assets.corpus import corpus_parts as parts
    from shopdistill_assets.corpus.decide import DecideConfig

    path = tmp_path / "junk.jsonl.gz"
    _gzip_stream(path, (b"%06d" % i + b"!" * 60_000 + b"\n" for i in range(2000)))
    firehose = FirehoseResource(root=str(tmp_path))
    from resources.firehose import FirehoseFile

    file = FirehoseFile(name="junk.jsonl.gz", uri=str(path), size_bytes=path.stat().st_size)
    outs = {t: tmp_path / f"{t}.parquet" for t in parts.TABLES}
    tracemalloc.start()
    try:
        staged = parts.stage_file(file.name, firehose.day_file_chunks(file), DAY, DecideConfig(), tmp_path / "s.arrow")
        split = parts.split_file(staged, parts.SUPERSEDED_SCHEMA.empty_table(), DAY, outs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert staged.units == 2000 and split.outputs["rejected_traces"] == 2000
    assert split.reasons == {("read", "json_decode"): 2000}
    ledger = pq.ParquetFile(outs["rejected_traces"])
    assert ledger.metadata.num_row_groups == 2  # 1,024-row groups: never the whole ledger at once
    lengths = pa.compute.utf8_length(pq.read_table(outs["rejected_traces"], columns=["raw_line"])["raw_line"])
    assert pa.compute.min_max(lengths).as_py() == {"min": 60_006, "max": 60_006}
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.0f} MiB for 120 MB of rejected lines"


# ---- item 8: a file that fails its integrity check is not trusted ----------------------------------


@pytest.mark.parametrize("name", ["crc.jsonl.gz", "checksum.jsonl.zst"])
def test_a_file_that_fails_its_checksum_is_not_trusted(tmp_path, name):
    lines = [orjson.dumps({**orjson.loads(good().splitlines()[i % 4]), "eval_run_id": f"run-{i}"}) + b"\n"
             for i in range(200)]  # ~1.3 MB: more than one read chunk, so lines decode before the check
    if name.endswith(".gz"):
        data = bytearray(gzip.compress(b"".join(lines), mtime=0))
        data[-6] ^= 0x01  # inside the CRC-32 trailer: every byte inflates, then the check fails
    else:
        data = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(b"".join(lines)))
        data[-2] ^= 0x01  # inside the frame's content checksum
    result, lake = run_day(tmp_path, {name: bytes(data), "good.jsonl": good()})

    assert result.success and conserved(result)
    bad = fates(lake, name)  # the lines decoded before the check failed, then the failure itself
    assert len(bad) >= 50 and bad == [(n, "corrupt_file") for n in range(1, len(bad) + 1)]
    ledger = lake.read_day("rejected_traces", DAY).filter(pl.col("source_file") == name)
    assert ledger["raw_line"].null_count() == len(bad)
    assert ledger["trace_id"].null_count() == 1  # the decoded traces keep their identity
    assert "decoded as a trace" in ledger["detail"][0]
    assert "checksum" in ledger["detail"][-1] or "incorrect data check" in ledger["detail"][-1]
    assert len(fates(lake, "good.jsonl")) == 4


def test_a_small_gzip_file_that_fails_its_checksum_sends_every_decoded_line_to_the_ledger(tmp_path):
    # Small enough to inflate in one call: zlib's gzip mode would drop all 50 decoded lines with
    # the failed check (one "after 0 lines" row); an independent inflate counts 50.
    lines = [orjson.dumps({**orjson.loads(good().splitlines()[i % 4]), "eval_run_id": f"run-{i}"}) + b"\n"
             for i in range(50)]
    data = bytearray(gzip.compress(b"".join(lines), mtime=0))
    data[-6] ^= 0x01  # the CRC-32 trailer
    independent = zlib.decompressobj(wbits=-15).decompress(bytes(data[10:])).count(b"\n")
    result, lake = run_day(tmp_path, {"small.jsonl.gz": bytes(data), "good.jsonl": good()})

    assert result.success and conserved(result)
    bad = fates(lake, "small.jsonl.gz")
    assert independent == 50
    assert bad == [(n, "corrupt_file") for n in range(1, independent + 2)]  # 50 lines + the fault
    detail = lake.read_day("rejected_traces", DAY).filter(pl.col("source_file") == "small.jsonl.gz")["detail"]
    assert "after 50 lines" in detail[-1] and "CRC-32" in detail[-1]


# ---- item 11: limits of times, truncation, sizes (part numbers: tests/test_lake.py) ----------------


@pytest.mark.parametrize(("stamp", "canonical"), [
    ("0001-01-01T00:30:00+01:00", None), ("9999-12-31T23:59:59-01:00", None),
    ("0001-01-01T00:00:00Z", "0001-01-01T00:00:00Z"), ("9999-12-31T23:59:59.999999+00:00", "9999-12-31T23:59:59.999999Z"),
])
def test_updated_at_at_the_date_limits_is_not_a_reader_error(stamp, canonical):
    out = normalize_record({**primary_record(), "updated_at": stamp}, day=DAY, source_file="f", source_line=1)
    assert isinstance(out, dict), out
    assert out["updated_at"] == canonical


def test_a_truncated_file_logs_its_partial_last_line(tmp_path):
    stored = gzip.compress(good(), mtime=0)
    cut = stored[: len(stored) * 7 // 10]
    decoded = zlib.decompressobj(wbits=31).decompress(cut)
    partial = decoded[decoded.rindex(b"\n") + 1 :]
    assert partial  # the cut falls inside a line
    result, lake = run_day(tmp_path, {"cut.jsonl.gz": cut})

    assert result.success and conserved(result)
    ledger = lake.read_day("rejected_traces", DAY)
    (row,) = ledger.filter(pl.col("reason") == "truncated_file").to_dicts()
    assert row["source_line"] == decoded.count(b"\n") + 1
    assert row["raw_line"] == partial.decode("utf-8", "replace")
    assert f"({len(partial)} bytes of a partial line)" in row["detail"]


def test_a_huge_query_is_not_kept_in_subtask_traces():
    rec = primary_record()
    huge = {**rec, "problem": {**rec["problem"], "query": "red bag " * 12_500}}  # 100 KB
    assert _reason(huge) == "over_limit"
    # 50 MB queries do not get that far: their line is over the reader's limit (see above).


# ---- item 13: one "latest upload wins" rule ------------------------------------------------------------


def test_latest_upload_wins_by_one_rule_everywhere(tmp_path):
    from shopdistill_assets.corpus.normalize import dedupe_within_day, iter_records
    from shopdistill_assets.split.snapshots import latest_per_trace

    rec = primary_record()
    lines = [("a.jsonl", 1, orjson.dumps({**rec, "updated_at": "2026-11-30T10:00:00.500000Z"})),
             ("b.jsonl", 1, orjson.dumps({**rec, "updated_at": "2026-11-30T10:00:00Z"}))]
    rows = [row for kind, row in iter_records(lines, DAY) if kind == "trace"]
    kept, _ = dedupe_within_day(rows)
    assert [r["source_file"] for r in kept] == ["a.jsonl"]  # .5 s later, though "." < "Z" as text

    keys = [(r["trace_id"], r["updated_at"], r["source_file"], r["source_line"]) for r in rows]
    frame = pl.DataFrame({"trace_id": [k[0] for k in keys], "updated_at": [k[1] for k in keys], "day": [DAY, DAY],
                          "source_file": [k[2] for k in keys], "source_line": [k[3] for k in keys]})
    assert latest_per_trace(frame)["source_file"].to_list() == ["a.jsonl"]  # the train snapshot's choice

    from shopdistill_assets.corpus import corpus_parts

    for name, line in (("a.jsonl", lines[0][2]), ("b.jsonl", lines[1][2])):
        (tmp_path / name).write_bytes(line + b"\n")
    from shopdistill_assets.corpus.decide import DecideConfig

    staged = [corpus_parts.stage_file(n, [(tmp_path / n).read_bytes()], DAY, DecideConfig(), tmp_path / f"{n}.arrow")
              for n in ("a.jsonl", "b.jsonl")]
    assert [t.to_pylist() for t in corpus_parts.superseded_day(staged)] == [[], [{"source_line": 1, "detail": (
        "superseded by a.jsonl:1 (updated_at 2026-11-30T10:00:00.500000Z vs 2026-11-30T10:00:00Z)")}]]
