"""The fused pass (core/corpus_parts.py) gives the stage-by-stage reference's tables byte for byte.

The reference (core/corpus_reference.py) runs the stages as the pipeline did before they were
fused: normalize to a staging part, dedupe, read back, classify, read back, gate, one ledger.
Both run here on simulator days (every dialect and style, corrupt lines, re-uploads, a
truncated file, a file of more than one row group), on the shared real-shaped samples, and on
hostile files (corrupt, oversize lines), and every Parquet part must be the same bytes.
"""

from __future__ import annotations

import gzip
import shutil
from datetime import date
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
import zstandard
from conftest import sample_lines

from resources.firehose import FirehoseResource
from shopdistill_assets.core import corpus_parts as parts
from shopdistill_assets.core import corpus_reference as reference
from shopdistill_assets.core.decide import AGENTIC_SCHEMA, TRACE_TEXT_COLUMNS, DecideConfig
from shopdistill_assets.core.gates import GateConfig
from shopdistill_assets.core.structural import StructuralConfig
from shopdistill_assets.sim import ArenaConfig, simulate


def reference_tables(firehose: FirehoseResource, day: str, out: Path, cfg: DecideConfig) -> dict[str, list[Path]]:
    files = firehose.list_day(day)
    out.mkdir(parents=True)
    tables = {t: [out / f"{t}-{i:05d}.parquet" for i in range(len(files))] for t in parts.TABLES}
    staged = [out / f"staged-{i:05d}.parquet" for i in range(len(files))]
    normalized = [reference.normalize_part(day, f.name, lambda f=f: firehose.day_file_chunks(f), s)
                  for f, s in zip(files, staged)]
    losers = reference.superseded(k for r in normalized for k in r.keys)
    results = list(normalized)
    for i in range(len(files)):
        agentic_rows = out / f"agentic-rows-{i:05d}.parquet"
        results.append(reference.dedupe_part(staged[i], tables["normalized_traces"][i], losers))
        results.append(reference.structural_part(tables["normalized_traces"][i], tables["agentic_traces"][i],
                                                 tables["subtask_traces"][i], cfg.structural, agentic_rows))
        results.append(reference.gate_part(agentic_rows, tables["gated_traces"][i], cfg.gates))
    reference.write_ledger([row for r in results for row in r.ledger], [f.name for f in files],
                           tables["rejected_traces"])
    return tables


def fused_tables(firehose: FirehoseResource, day: str, out: Path, cfg: DecideConfig) -> dict[str, list[Path]]:
    files = firehose.list_day(day)
    out.mkdir(parents=True)
    tables = {t: [out / f"{t}-{i:05d}.parquet" for i in range(len(files))] for t in parts.TABLES}
    staged = [parts.stage_file(f.name, firehose.day_file_chunks(f), day, cfg, out / f"staged-{i:05d}.arrow")
              for i, f in enumerate(files)]
    for i, (s, superseded) in enumerate(zip(staged, parts.superseded_day(staged))):
        parts.split_file(s, superseded, day, {t: tables[t][i] for t in parts.TABLES})
    return tables


def assert_same_bytes(firehose: FirehoseResource, day: str, out: Path, cfg: DecideConfig | None = None) -> dict:
    cfg = cfg or DecideConfig()
    ref = reference_tables(firehose, day, out / "reference", cfg)
    fused = fused_tables(firehose, day, out / "fused", cfg)
    rows = {}
    for table in parts.TABLES:
        for a, b in zip(ref[table], fused[table], strict=True):
            assert a.read_bytes() == b.read_bytes(), (day, table, a.name, pq.read_table(a).num_rows,
                                                      pq.read_table(b).num_rows)
        rows[table] = sum(pq.ParquetFile(p).metadata.num_rows for p in fused[table])
    return rows


@pytest.fixture(scope="module")
def arenas(tmp_path_factory) -> dict[str, Path]:
    """Two simulated arenas: one big file (several row groups), and faulty small days."""
    big = tmp_path_factory.mktemp("big")
    simulate(ArenaConfig(out=big, start_day=date(2026, 11, 2), days=1, traces_per_day=4500, seed=5,
                         corrupt_share=0.01, reupload_share=0.05))
    faulty = tmp_path_factory.mktemp("faulty")
    simulate(ArenaConfig(out=faulty, start_day=date(2026, 11, 2), days=2, traces_per_day=300, seed=11,
                         corrupt_share=0.08, reupload_share=0.1))
    return {"big": big, "faulty": faulty}


def test_a_day_of_several_row_groups(arenas, tmp_path):
    rows = assert_same_bytes(FirehoseResource(root=str(arenas["big"] / "firehose")), "2026-11-02", tmp_path)
    assert rows["normalized_traces"] > parts.ROW_GROUP_ROWS and rows["agentic_traces"] > parts.ROW_GROUP_ROWS
    assert rows["rejected_traces"] > parts.LEDGER_GROUP_ROWS
    # agentic_traces carries the verdict, not the text: every gated trace is one of its rows
    agentic = pq.read_table(tmp_path / "fused" / "agentic_traces-00000.parquet")
    gated = pq.read_table(tmp_path / "fused" / "gated_traces-00000.parquet")
    assert agentic.schema.names == AGENTIC_SCHEMA.names and not set(TRACE_TEXT_COLUMNS) & set(agentic.schema.names)
    assert set(TRACE_TEXT_COLUMNS) <= set(gated.schema.names) and gated.num_rows
    assert set(gated["trace_id"].to_pylist()) <= set(agentic["trace_id"].to_pylist())


@pytest.mark.parametrize("day", ["2026-11-02", "2026-11-03"])
def test_faulty_days_and_another_config(arenas, tmp_path, day):
    firehose = FirehoseResource(root=str(arenas["faulty"] / "firehose"))
    rows = assert_same_bytes(firehose, day, tmp_path / "default")
    assert all(rows.values())
    strict = DecideConfig(StructuralConfig(subtask_threshold=1, no_evidence_label="agentic"),
                          GateConfig(min_reasoning_score=0.8, missing_judge_policy="reject", max_tokens=3000))
    strict_rows = assert_same_bytes(firehose, day, tmp_path / "strict", strict)
    assert strict_rows["gated_traces"] < rows["gated_traces"]


def test_batching_does_not_change_the_bytes(arenas, tmp_path, monkeypatch):
    monkeypatch.setattr(parts, "BATCH_ROWS", 97)
    monkeypatch.setattr(parts, "BATCH_BYTES", 50_000)
    assert_same_bytes(FirehoseResource(root=str(arenas["faulty"] / "firehose")), "2026-11-02", tmp_path)


def test_shared_samples_and_hostile_files(shared_dir, tmp_path):
    folder = tmp_path / "firehose" / "day=2026-11-20"
    folder.mkdir(parents=True)
    samples = shared_dir / "samples"
    shutil.copyfile(samples / "sn15-day.jsonl.gz", folder / "part-000.jsonl.gz")
    rollout = orjson.loads((samples / "shoppingbench-rollout.json").read_bytes())
    (folder / "part-001.jsonl").write_bytes(orjson.dumps(rollout) + b"\n")
    shutil.copyfile(samples / "openai-messages.jsonl", folder / "part-002.jsonl")
    good = b"".join(sample_lines()[:4])
    crc = bytearray(gzip.compress(good * 60, mtime=0))
    crc[-6] ^= 1
    (folder / "part-003-crc.jsonl.gz").write_bytes(bytes(crc))
    bad_zstd = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(good * 60))
    bad_zstd[len(bad_zstd) // 2] ^= 0xFF
    (folder / "part-004-bad.jsonl.zst").write_bytes(bytes(bad_zstd))
    big = b'{"problem": {"query": "' + b"q" * (9 << 20) + b'"}}'
    (folder / "part-005-big.jsonl.gz").write_bytes(gzip.compress(good + big + b"\n" + good + b"\r\n\r\n", mtime=0))
    (folder / "part-006-cut.jsonl.gz").write_bytes(gzip.compress(good, mtime=0)[:-900])
    rows = assert_same_bytes(FirehoseResource(root=str(tmp_path / "firehose")), "2026-11-20", tmp_path / "out")
    assert rows["gated_traces"] >= 4 and rows["rejected_traces"] >= 10
