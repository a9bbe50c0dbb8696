"""The corpus path over one part of a day: a firehose file, or one Parquet part of a stage.

Each function reads one input, streams rows in batches to one Parquet output and returns the
ledger rows and counts; the Dagster assets run them in a process pool, one part per task, so a
large day uses every core and never sits in memory whole. Every input unit (a decodable line,
or the one read error that ends a damaged file) leaves exactly one row in some output.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from .dialects import CANONICAL_COLUMNS
from .gates import GateConfig, format_gate, reasoning_gate
from .normalize import LEDGER_COLUMNS, LedgerRow, _recency, iter_records, ledger_row, ledger_row_for_trace
from .reasons import Reason, Rejection
from .structural import StructuralConfig, classify

BATCH_ROWS = 2_000
_INT_COLUMNS = {"race_id", "suite_id", "inference_total", "inference_failure_count", "n_steps", "n_tool_calls",
                "source_line"}
_FLOAT_COLUMNS = {"score", "reasoning_score", "reasoning_coef", "execution_time"}


def _type(column: str) -> pa.DataType:
    if column in _INT_COLUMNS:
        return pa.int64()
    if column in _FLOAT_COLUMNS:
        return pa.float64()
    return pa.large_string() if column in ("messages", "tools", "proxy_evidence") else pa.string()


CANONICAL_SCHEMA = pa.schema([(c, _type(c)) for c in CANONICAL_COLUMNS])
STRUCTURAL_SCHEMA = CANONICAL_SCHEMA.append(pa.field("structural_label", pa.string())).append(
    pa.field("structural_evidence", pa.string()))
LEDGER_SCHEMA = pa.schema([(c, pa.int64() if c == "source_line" else
                            (pa.large_string() if c == "raw_line" else pa.string())) for c in LEDGER_COLUMNS])
# Intermediate parts are written uncompressed (fast); the lake's parts are zstd.
STAGING_OPTIONS: dict[str, Any] = {"compression": "none", "use_dictionary": False}
# zstd level 1: within a few percent of level 3 on trace text, and several times faster to write.
FINAL_OPTIONS: dict[str, Any] = {"compression": "zstd", "compression_level": 1, "use_dictionary": True,
                                 "write_statistics": True, "version": "2.6", "data_page_version": "1.0"}


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

    def __init__(self, path: Path, schema: pa.Schema, options: dict[str, Any] = FINAL_OPTIONS) -> None:
        self.schema, self.rows = schema, 0
        self._writer = pq.ParquetWriter(path, schema, **options)
        self._pending: list[dict] = []

    def write(self, table: pa.Table | pa.RecordBatch) -> None:
        if table.num_rows:
            self._writer.write_table(pa.Table.from_batches([table]) if isinstance(table, pa.RecordBatch) else table)
            self.rows += table.num_rows

    def add(self, row: dict) -> None:
        self._pending.append(row)
        if len(self._pending) >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self.write(pa.Table.from_pylist(self._pending, self.schema))
            self._pending = []

    def close(self) -> int:
        self._flush()
        self._writer.close()
        return self.rows


def read_units(name: str, stream: IO[bytes], day: str) -> Iterator[tuple[str, int, bytes] | LedgerRow]:
    """(file, line number, raw line) per line; a damaged file ends with one ledger row."""
    line_no = 0
    try:
        for raw in stream:
            line_no += 1
            yield name, line_no, raw.rstrip(b"\r\n")
    except (EOFError, OSError, zlib.error, ValueError) as exc:
        reason = Reason.TRUNCATED_FILE if isinstance(exc, EOFError) else Reason.READ_ERROR
        detail = f"{type(exc).__name__}: {str(exc)[:200]} after {line_no} lines"
        yield ledger_row(Rejection.of(reason, detail), day=day, source_file=name, source_line=line_no + 1)


def normalize_part(day: str, name: str, open_stream: Callable[[], IO[bytes]], out_path: Path) -> PartResult:
    """Firehose file -> canonical rows (staging Parquet) + ledger rows + dedupe keys."""
    result = PartResult()
    writer = _ArrowWriter(out_path, CANONICAL_SCHEMA, STAGING_OPTIONS)
    lines: list[tuple[str, int, bytes]] = []

    def flush_lines() -> None:
        for kind, row in iter_records(lines, day):
            if kind == "trace":
                writer.add(row)
                result.keys.append((row["trace_id"], row.get("updated_at"), row["source_file"], row["source_line"]))
            else:
                result.ledger.append(row)
        lines.clear()

    with open_stream() as stream:
        for unit in read_units(name, stream, day):
            result.units += 1
            if isinstance(unit, dict):
                result.ledger.append(unit)
            else:
                lines.append(unit)
                if len(lines) >= BATCH_ROWS:
                    flush_lines()
    flush_lines()
    result.kept = writer.close()
    return result


def superseded(keys: Iterable[tuple[str, str | None, str, int]]) -> dict[tuple[str, int], tuple[str, int, str | None]]:
    """Within-day dedupe over keys only: loser (file, line) -> winner (file, line, updated_at)."""
    best: dict[str, dict] = {}
    losers: list[dict] = []
    for trace_id, updated_at, source_file, source_line in keys:
        row = {"updated_at": updated_at, "source_file": source_file, "source_line": source_line}
        cur = best.get(trace_id)
        if cur is None:
            best[trace_id] = row
        elif _recency(row) > _recency(cur):
            losers.append(cur)
            best[trace_id] = row
        else:
            losers.append(row)
        row["trace_id"] = trace_id
    return {(r["source_file"], r["source_line"]): (best[r["trace_id"]]["source_file"],
            best[r["trace_id"]]["source_line"], best[r["trace_id"]]["updated_at"]) for r in losers}


_IDENTITY = ["trace_id", "eval_run_id", "problem_id", "miner_hotkey", "day", "source_file", "source_line"]


def _decide_batches(in_path: Path, columns: list[str]) -> Iterator[tuple[pa.RecordBatch, list[dict]]]:
    """(whole batch, its rows holding only `columns` + identity): a stage decides on a few
    columns and then filters whole Arrow batches, never round-tripping messages through dicts."""
    parquet = pq.ParquetFile(in_path)
    wanted = list(dict.fromkeys([*_IDENTITY, *columns]))
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
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
                detail = f"superseded by {winner[0]}:{winner[1]} (updated_at {winner[2]} vs {row.get('updated_at')})"
                result.ledger.append(ledger_row_for_trace(row, Rejection.of(Reason.SUPERSEDED, detail)))
        writer.write(batch.filter(pa.array(keep)))
    result.kept = writer.close()
    result.outputs = {"normalized_traces": result.kept}
    return result


def structural_part(in_path: Path, agentic_path: Path, subtask_path: Path, cfg: StructuralConfig) -> PartResult:
    """Normalized part -> agentic rows, sub-task rows (both with their evidence), ledger rows."""
    result = PartResult()
    writers = {"agentic": _ArrowWriter(agentic_path, STRUCTURAL_SCHEMA),
               "subtask": _ArrowWriter(subtask_path, STRUCTURAL_SCHEMA)}
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
    result.outputs = {f"{label}_traces": w.close() for label, w in writers.items()}
    result.kept = sum(result.outputs.values())
    return result


def gate_part(in_path: Path, out_path: Path, cfg: GateConfig, tokenizer: Any | None = None) -> PartResult:
    """Agentic part -> rows that pass the reasoning gate and the format gate, ledger rows."""
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


def write_ledger(rows: list[LedgerRow], path: Path) -> int:
    """Ledger rows -> one Parquet file, sorted by (file, line, stage) for byte-stable output."""
    rows = sorted(rows, key=lambda r: (r["source_file"], r["source_line"], r["stage"]))
    pq.write_table(pa.Table.from_pylist(rows, LEDGER_SCHEMA), path, **FINAL_OPTIONS)
    return len(rows)
