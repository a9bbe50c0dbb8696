"""The corpus path stage by stage: the reference the fused pass (corpus_parts.py) must equal.

normalize_part -> superseded -> dedupe_part -> structural_part -> gate_part -> write_ledger,
each reading the previous stage's Parquet part back, as the pipeline ran before the stages
were fused. They give the same tables, byte for byte, as corpus_parts on the same inputs
(tests/test_corpus_fused.py), so a change to the per-row rules shows up in both or in the
test. Not used by the assets: kept for that comparison and for reading one stage in isolation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .corpus_parts import (
    LEDGER_GROUP_ROWS,
    ROW_GROUP_ROWS,
    STAGING_OPTIONS,
    corrupt_ledger_row,
    end_ledger_row,
    final_options,
    oversize_ledger_row,
)
from .decide import AGENTIC_SCHEMA, CANONICAL_SCHEMA, LEDGER_SCHEMA, STRUCTURAL_SCHEMA
from .gates import GateConfig, format_gate, reasoning_gate
from .lines import FileEnd, LineReader, OversizeLine
from .normalize import LedgerRow, iter_records, ledger_row_for_trace, superseded_detail
from .reasons import Reason, Rejection
from .recency import latest_copy
from .structural import StructuralConfig, classify

import polars as pl


@dataclass
class PartResult:
    """What one part produced: counts by output, ledger rows, and (normalize) dedupe keys."""

    units: int = 0
    kept: int = 0
    outputs: dict[str, int] = field(default_factory=dict)
    ledger: list[LedgerRow] = field(default_factory=list)
    keys: list[tuple[str, str | None, str, int]] = field(default_factory=list)


class _ArrowWriter:
    """Arrow batches (or rows, buffered into batches) -> one Parquet file."""

    def __init__(self, path: Path, schema: pa.Schema, options: dict[str, Any] | None = None) -> None:
        self.schema, self.rows = schema, 0
        self._writer = pq.ParquetWriter(path, schema, **(final_options(schema) if options is None else options))
        self._pending: list[dict] = []

    def write(self, table: pa.Table | pa.RecordBatch) -> None:
        if table.num_rows:
            self._writer.write_table(pa.Table.from_batches([table]) if isinstance(table, pa.RecordBatch) else table)
            self.rows += table.num_rows

    def add(self, row: dict) -> None:
        self._pending.append(row)
        if len(self._pending) >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self.write(pa.Table.from_pylist(self._pending, self.schema))
            self._pending = []

    def close(self) -> int:
        self._flush()
        self._writer.close()
        return self.rows


def read_units(name: str, chunks: Iterable[bytes], day: str) -> Iterator[tuple[str, int, bytes] | LedgerRow]:
    """(file, line number, raw line) per line; an oversize line is a ledger row, and a file that
    did not end cleanly ends with one more (core/lines.py)."""
    reader = LineReader(chunks)
    for item in reader:
        if isinstance(item, OversizeLine):
            yield oversize_ledger_row(item, day=day, source_file=name, source_line=reader.lines)
        else:
            yield name, reader.lines, item
    if reader.end is not None:
        yield end_ledger_row(reader.end, day=day, source_file=name, source_line=reader.lines + 1)


def normalize_part(day: str, name: str, open_chunks: Callable[[], Iterable[bytes]], out_path: Path) -> PartResult:
    """Firehose file -> canonical rows (staging Parquet) + ledger rows + dedupe keys."""
    result = PartResult()
    writer = _ArrowWriter(out_path, CANONICAL_SCHEMA, STAGING_OPTIONS)
    lines: list[tuple[str, int, bytes]] = []
    order: list[tuple[int, LedgerRow | None]] = []  # every unit in order: a ledger row, or None for a trace
    traces: list[dict] = []  # identity of each trace, for the corrupt-file rule

    def flush_lines() -> None:
        for kind, row in iter_records(lines, day):
            if kind == "trace":
                writer.add(row)
                result.keys.append((row["trace_id"], row.get("updated_at"), row["source_file"], row["source_line"]))
                traces.append(row)
                order.append((row["source_line"], None))
            else:
                order.append((row["source_line"], row))
        lines.clear()

    end: FileEnd | None = None
    for unit in read_units(name, open_chunks(), day):
        result.units += 1
        if isinstance(unit, dict):
            flush_lines()
            order.append((unit["source_line"], unit))
            if unit["reason"] == Reason.CORRUPT_FILE:
                end = FileEnd(Reason.CORRUPT_FILE, unit["detail"], b"")
        else:
            lines.append(unit)
            if len(lines) >= ROW_GROUP_ROWS:
                flush_lines()
    flush_lines()
    if end is None:
        result.ledger = [row for _, row in order if row is not None]
        result.kept = writer.close()
        return result
    writer.close()  # a corrupt file: nothing of it is trusted
    _ArrowWriter(out_path, CANONICAL_SCHEMA, STAGING_OPTIONS).close()
    by_line = {t["source_line"]: t for t in traces}
    result.ledger = [corrupt_ledger_row(row if row is not None else by_line[line], end.detail, day=day,
                                        source_file=name, source_line=line) for line, row in order]
    result.keys, result.kept = [], 0
    return result


def superseded(keys: Iterable[tuple[str, str | None, str, int]]) -> dict[tuple[str, int], tuple[str, int, str | None]]:
    """Within-day dedupe over keys only (core/recency.py): loser (file, line) -> winner
    (file, line, updated_at)."""
    rows = list(keys)
    if not rows:
        return {}
    frame = pl.DataFrame(rows, schema={"trace_id": pl.String, "updated_at": pl.String, "source_file": pl.String,
                                       "source_line": pl.Int64}, orient="row")
    out = {}
    for row, latest in zip(rows, latest_copy(frame).to_list()):
        winner = rows[latest]
        if winner is not row:
            out[(row[2], row[3])] = (winner[2], winner[3], winner[1])
    return out


_IDENTITY = ["trace_id", "eval_run_id", "problem_id", "miner_hotkey", "day", "source_file", "source_line"]


def _decide_batches(in_path: Path, columns: list[str]) -> Iterator[tuple[pa.RecordBatch, list[dict]]]:
    """(whole batch, its rows holding only `columns` + identity)."""
    parquet = pq.ParquetFile(in_path)
    wanted = list(dict.fromkeys([*_IDENTITY, *columns]))
    for batch in parquet.iter_batches(batch_size=ROW_GROUP_ROWS):
        yield batch, batch.select(wanted).to_pylist()


def dedupe_part(in_path: Path, out_path: Path, losers: dict[tuple[str, int], tuple]) -> PartResult:
    """Staging part -> final normalized part without superseded rows (they go to the ledger)."""
    result = PartResult()
    writer = _ArrowWriter(out_path, CANONICAL_SCHEMA)
    for batch, rows in _decide_batches(in_path, ["updated_at"]):
        result.units += len(rows)
        keep = []
        for row in rows:
            winner = losers.get((row["source_file"], row["source_line"]))
            keep.append(winner is None)
            if winner is not None:
                detail = superseded_detail({"source_file": winner[0], "source_line": winner[1],
                                            "updated_at": winner[2]}, row)
                result.ledger.append(ledger_row_for_trace(row, Rejection.of(Reason.SUPERSEDED, detail)))
        writer.write(batch.filter(pa.array(keep)))
    result.kept = writer.close()
    result.outputs = {"normalized_traces": result.kept}
    return result


def structural_part(in_path: Path, agentic_path: Path, subtask_path: Path, cfg: StructuralConfig,
                    agentic_rows_path: Path) -> PartResult:
    """Normalized part -> agentic rows, sub-task rows (both with their evidence), ledger rows.
    agentic_path gets the agentic table (AGENTIC_SCHEMA: no trace text); agentic_rows_path the
    same rows whole (a staging part, the gate's input)."""
    result = PartResult()
    writers = {"agentic": _ArrowWriter(agentic_rows_path, STRUCTURAL_SCHEMA, STAGING_OPTIONS),
               "subtask": _ArrowWriter(subtask_path, STRUCTURAL_SCHEMA)}
    verdicts = _ArrowWriter(agentic_path, AGENTIC_SCHEMA)
    for batch, rows in _decide_batches(in_path, ["dialect", "messages", "proxy_evidence"]):
        result.units += len(rows)
        labels, evidence = [], []
        for row in rows:
            decision = classify(row, cfg)
            rejection = decision.rejection()
            if rejection is not None:
                result.ledger.append(ledger_row_for_trace(row, Rejection(
                    rejection.stage, rejection.reason, rejection.detail or decision.evidence_json())))
            labels.append(decision.label)
            evidence.append(decision.evidence_json())
        table = pa.Table.from_batches([batch]).append_column("structural_label", pa.array(labels, pa.string())) \
            .append_column("structural_evidence", pa.array(evidence, pa.string()))
        for label, writer in writers.items():
            writer.write(table.filter(pa.array([lab == label for lab in labels])))
        verdicts.write(table.filter(pa.array([lab == "agentic" for lab in labels])).select(AGENTIC_SCHEMA.names))
    result.outputs = {f"{label}_traces": w.close() for label, w in writers.items()}
    verdicts.close()
    result.kept = sum(result.outputs.values())
    return result


def gate_part(in_path: Path, out_path: Path, cfg: GateConfig, tokenizer: Any | None = None) -> PartResult:
    """Agentic rows (structural_part's agentic_rows_path) -> rows that pass the reasoning gate
    and the format gate, ledger rows."""
    result = PartResult()
    writer = _ArrowWriter(out_path, STRUCTURAL_SCHEMA)
    for batch, rows in _decide_batches(in_path, ["dialect", "reasoning_score", "messages", "tools"]):
        result.units += len(rows)
        keep = []
        for row in rows:
            rejection = reasoning_gate(row, cfg) or format_gate(row, cfg, tokenizer)
            keep.append(rejection is None)
            if rejection is not None:
                result.ledger.append(ledger_row_for_trace(row, rejection))
        writer.write(batch.filter(pa.array(keep)))
    result.kept = writer.close()
    result.outputs = {"gated_traces": result.kept}
    return result


def write_ledger(rows: list[LedgerRow], files: list[str], paths: list[Path]) -> int:
    """Ledger rows -> one Parquet part per firehose file (paths[i] for files[i]), each sorted by
    (line, stage), in row groups of LEDGER_GROUP_ROWS."""
    by_file: dict[str, list[LedgerRow]] = {name: [] for name in files}
    for row in rows:
        by_file[row["source_file"]].append(row)
    for name, path in zip(files, paths):
        part = sorted(by_file[name], key=lambda r: (r["source_line"], r["stage"]))
        with pq.ParquetWriter(path, LEDGER_SCHEMA, **final_options(LEDGER_SCHEMA)) as writer:
            if part:  # an empty part has no row group at all
                writer.write_table(pa.Table.from_pylist(part, LEDGER_SCHEMA), row_group_size=LEDGER_GROUP_ROWS)
    return len(rows)
