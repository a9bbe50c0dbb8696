"""The corpus path in one pass per line: stage each firehose file, dedupe the day, split.

    stage_file      (one task per file)  read lines (corpus/lines.py), decide each batch of lines
                    (corpus/decide.py: normalize, classify, gate, in memory), append the decided
                    rows to an Arrow IPC file: one row per input unit, in line order
    superseded_day  (the whole day)      which traces a later copy beat (core/recency.py)
    split_file      (one task per file)  the staged rows -> the day's tables with Arrow filters:
                    normalized_traces, agentic_traces, subtask_traces, gated_traces, and the
                    ledger (rejected_traces), one Parquet part each

Every unit (a line, or the one fault that ends a damaged file) is one staged row and lands in
exactly one of gated_traces, subtask_traces, rejected_traces. Memory is bounded per task:
batches of at most BATCH_ROWS lines / BATCH_BYTES bytes, a row group of each output.

Row groups: a table's part takes the rows of consecutive staged batches until it holds about
ROW_GROUP_ROWS rows (the ledger: LEDGER_GROUP_ROWS, as a ledger row keeps up to 64 KiB of raw
line); batches are cut by BATCH_ROWS / BATCH_BYTES from the lines alone, so the same file
gives the same bytes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shopdistill_assets.core.recency import latest_copy
from shopdistill_assets.corpus.decide import (
    AGENTIC_SCHEMA,
    CANONICAL_SCHEMA,
    DECIDED_SCHEMA,
    LEDGER_SCHEMA,
    STRUCTURAL_SCHEMA,
    DecideConfig,
    decide_lines,
)
from shopdistill_assets.corpus.lines import MAX_LINE_BYTES, FileEnd, LineReader, OversizeLine
from shopdistill_assets.corpus.normalize import LedgerRow, ledger_row
from shopdistill_assets.corpus.reasons import Reason, Rejection

ROW_GROUP_ROWS = 2_000  # rows of a trace table's row group, about (see the module doc)
BATCH_ROWS = 2_000  # lines decided at a time
BATCH_BYTES = 8 * 1024 * 1024  # raw bytes of a batch of lines: rejected lines' text is held per batch only
LEDGER_GROUP_ROWS = 1024  # a ledger row keeps up to 64 KiB of raw line: row groups stay <= ~64 MiB
# zstd level 1: within a few percent of level 3 on trace text, and several times faster to write.
FINAL_OPTIONS: dict[str, Any] = {"compression": "zstd", "compression_level": 1, "use_dictionary": True,
                                 "write_statistics": True, "version": "2.6", "data_page_version": "1.0"}
# Columns of unique JSON text (a trace's messages, proxy evidence, a rejected raw line): a
# dictionary never pays off there and min/max statistics say nothing a query could prune on,
# while building both cost ~10 % of the split. Every other column keeps both.
NO_DICTIONARY = frozenset({"messages", "proxy_evidence", "raw_line"})
NO_STATISTICS = NO_DICTIONARY | {"tools", "structural_evidence"}


def final_options(schema: pa.Schema) -> dict[str, Any]:
    """FINAL_OPTIONS for the lake's corpus tables of `schema`, per column where it matters."""
    return {**FINAL_OPTIONS, "use_dictionary": [n for n in schema.names if n not in NO_DICTIONARY],
            "write_statistics": [n for n in schema.names if n not in NO_STATISTICS]}


TABLES = ("normalized_traces", "agentic_traces", "subtask_traces", "gated_traces", "rejected_traces")
TABLE_SCHEMAS = {"normalized_traces": CANONICAL_SCHEMA, "agentic_traces": AGENTIC_SCHEMA,
                 "subtask_traces": STRUCTURAL_SCHEMA, "gated_traces": STRUCTURAL_SCHEMA, "rejected_traces": LEDGER_SCHEMA}
_PRE_TRACE = pa.array(["read", "normalize"])  # stages that stop a line before it is a trace
_KEY_COLUMNS = ["trace_id", "updated_at_us", "updated_at", "source_line"]
SUPERSEDED_SCHEMA = pa.schema([("source_line", pa.int64()), ("detail", pa.string())])


# ---- ledger rows the reader makes ---------------------------------------------------------


def oversize_ledger_row(line: OversizeLine, *, day: str, source_file: str, source_line: int) -> LedgerRow:
    detail = f"{line.n_bytes} bytes > {MAX_LINE_BYTES}; first {len(line.head)} bytes kept"
    row = ledger_row(Rejection.of(Reason.LINE_TOO_LARGE, detail), day=day, source_file=source_file,
                     source_line=source_line, raw=line.head)
    row["detail"] = detail  # the head is already cut: no truncation note
    return row


def end_ledger_row(end: FileEnd, *, day: str, source_file: str, source_line: int) -> LedgerRow:
    """The unit after a file's last line: why it ended; a truncated file's partial line kept."""
    raw = None if end.reason == Reason.CORRUPT_FILE else end.partial or None
    return ledger_row(Rejection.of(end.reason, end.detail), day=day, source_file=source_file,
                      source_line=source_line, raw=raw)


def corrupt_ledger_row(row: dict, end_detail: str, *, day: str, source_file: str, source_line: int) -> LedgerRow:
    """A unit of a file that failed its integrity check: `corrupt_file`, whatever it decoded to
    (ledger rows of the reader or normalize, or a trace: its identity is kept, not its text)."""
    if row.get("reason") == Reason.CORRUPT_FILE:
        return {**row, "raw_line": None}
    was = row["reason"] if row.get("stage") in ("read", "normalize") else "a trace"
    return ledger_row(Rejection.of(Reason.CORRUPT_FILE, f"{end_detail}; this line decoded as {was}"),
                      day=day, source_file=source_file, source_line=source_line, identity=row)


# ---- stage -------------------------------------------------------------------------------


@dataclass
class StagedFile:
    """One firehose file, decided: the IPC file of its rows and what the day-level steps need."""

    name: str
    path: Path
    units: int = 0
    end: FileEnd | None = None
    keys: pa.Table | None = None  # _KEY_COLUMNS of its traces; None for a corrupt file
    checks: Counter = field(default_factory=Counter)  # the trace checks' counters; empty for a corrupt file

    @property
    def corrupt(self) -> bool:
        return self.end is not None and self.end.reason == Reason.CORRUPT_FILE


def _trace_mask(batch: pa.RecordBatch) -> pa.Array:
    return pc.invert(pc.fill_null(pc.is_in(batch.column("stage"), _PRE_TRACE), False))


def stage_file(name: str, chunks: Iterable[bytes], day: str, cfg: DecideConfig, out_path: Path) -> StagedFile:
    """Read one firehose file and decide every line; rows go to `out_path` (Arrow IPC stream)."""
    staged, reader, keys = StagedFile(name, out_path), LineReader(chunks), []
    pending: list[bytes] = []
    first = size = 0
    with pa.OSFile(str(out_path), "wb") as sink, pa.ipc.new_stream(sink, DECIDED_SCHEMA) as writer:

        def flush() -> None:
            nonlocal size
            if pending:
                batch = decide_lines(name, first, pending, day, cfg, staged.checks)
                writer.write_batch(batch)
                keys.append(batch.select(_KEY_COLUMNS).filter(_trace_mask(batch)))  # select first: no copy of messages
                pending.clear()
                size = 0

        def write_row(row: LedgerRow) -> None:
            writer.write_batch(pa.RecordBatch.from_pylist([row], DECIDED_SCHEMA))

        for item in reader:
            if isinstance(item, OversizeLine):
                flush()
                write_row(oversize_ledger_row(item, day=day, source_file=name, source_line=reader.lines))
                continue
            if not pending:
                first = reader.lines
            pending.append(item)
            size += len(item)
            if len(pending) >= BATCH_ROWS or size >= BATCH_BYTES:
                flush()
        flush()
        staged.end = reader.end
        if reader.end is not None:
            write_row(end_ledger_row(reader.end, day=day, source_file=name, source_line=reader.lines + 1))
    staged.units = reader.lines + (reader.end is not None)
    if staged.corrupt:
        staged.checks.clear()  # none of its traces goes on: every unit is a corrupt_file ledger row
    else:
        staged.keys = pa.Table.from_batches(keys, DECIDED_SCHEMA.empty_table().select(_KEY_COLUMNS).schema)
    return staged


# ---- the day -----------------------------------------------------------------------------


def superseded_day(staged: Sequence[StagedFile]) -> list[pa.Table]:
    """Per staged file: the trace copies that a later copy of the same trace (anywhere in the
    day) beat, as a table (source_line, detail) sorted by line; detail is the ledger's text."""
    frames = [pl.from_arrow(s.keys).with_columns(source_file=pl.lit(s.name, pl.String), file=pl.lit(i))
              for i, s in enumerate(staged) if s.keys is not None and s.keys.num_rows]
    empty = pl.DataFrame(schema={"source_line": pl.Int64, "detail": pl.String})
    if not frames:
        return [SUPERSEDED_SCHEMA.empty_table() for _ in staged]
    keys = pl.concat(frames)
    keys = keys.with_columns(latest=latest_copy(keys)).with_row_index("row")
    winners = keys.select("row", w_file="source_file", w_line="source_line", w_updated="updated_at")
    losers = keys.filter(pl.col("latest") != pl.col("row")).join(winners, left_on="latest", right_on="row").select(
        "file", "source_line", detail=pl.format(  # normalize.superseded_detail, column-wise ("None" for no time)
            "superseded by {}:{} (updated_at {} vs {})", "w_file", "w_line", pl.col("w_updated").fill_null("None"),
            pl.col("updated_at").fill_null("None")))
    by_file = losers.sort("file", "source_line").partition_by("file", as_dict=True, include_key=False)
    return [by_file.get((i,), empty).to_arrow().cast(SUPERSEDED_SCHEMA) for i in range(len(staged))]


# ---- split -------------------------------------------------------------------------------


class _TableWriter:
    """One Parquet part: filtered slices of staged batches, buffered into row groups of about
    `group_rows` rows (written as they come: the chunks are not combined first, no copy)."""

    def __init__(self, path: Path, schema: pa.Schema, group_rows: int) -> None:
        self.schema, self.rows, self._group_rows = schema, 0, group_rows
        self._writer = pq.ParquetWriter(path, schema, **final_options(schema))
        self._pending: list[pa.Table] = []
        self._pending_rows = 0

    def add(self, table: pa.Table) -> None:
        if table.num_rows:
            self._pending.append(table)
            self._pending_rows += table.num_rows
            if self._pending_rows >= self._group_rows:
                self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._writer.write_table(pa.concat_tables(self._pending), row_group_size=self._pending_rows)
            self.rows += self._pending_rows
            self._pending, self._pending_rows = [], 0

    def close(self) -> int:
        self._flush()
        self._writer.close()
        return self.rows


@dataclass
class SplitResult:
    """Rows per output table, ledger rows per (stage, reason), and the fates the checks gave
    the trace copies that were superseded ((structural_label, stage, reason) -> copies), of one file."""

    outputs: dict[str, int] = field(default_factory=dict)
    reasons: Counter = field(default_factory=Counter)
    superseded: Counter = field(default_factory=Counter)


def _ledger_table(rows: pa.RecordBatch, superseded: np.ndarray, loser_lines: np.ndarray,
                  details: pa.ChunkedArray) -> pa.Table:
    """Ledger rows from decided rows; superseded traces get their dedupe verdict."""
    table = pa.Table.from_batches([rows]).select(list(LEDGER_SCHEMA.names))
    if superseded.any():
        sup = pa.array(superseded)
        at = np.searchsorted(loser_lines, rows.column("source_line").to_numpy())  # loser_lines is sorted
        detail = pc.if_else(sup, details.take(pa.array(np.minimum(at, len(loser_lines) - 1))), table["detail"])
        for column, value in (("stage", pa.scalar("dedupe")), ("reason", pa.scalar(str(Reason.SUPERSEDED))),
                              ("detail", detail)):
            verdict = value if column == "detail" else pc.if_else(sup, value, table[column])
            table = table.set_column(table.schema.get_field_index(column), column, verdict)
    return table


def _corrupt_rows(batch: pa.RecordBatch, end: FileEnd, day: str, name: str) -> pa.Table:
    rows = [corrupt_ledger_row(r, end.detail, day=day, source_file=name, source_line=r["source_line"])
            for r in batch.select(list(LEDGER_SCHEMA.names)).to_pylist()]
    return pa.Table.from_pylist(rows, LEDGER_SCHEMA)


def split_file(staged: StagedFile, superseded: pa.Table, day: str, outs: dict[str, Path]) -> SplitResult:
    """Staged rows of one file -> one Parquet part per table in TABLES (paths in `outs`)."""
    writers = {name: _TableWriter(outs[name], TABLE_SCHEMAS[name],
                                  LEDGER_GROUP_ROWS if name == "rejected_traces" else ROW_GROUP_ROWS) for name in TABLES}
    result = SplitResult()
    loser_lines = superseded.column("source_line").to_numpy()
    details = superseded.column("detail")
    # Read batch by batch (not memory-mapped: a mapping would keep the whole staged file resident).
    with pa.OSFile(str(staged.path), "rb") as source, pa.ipc.open_stream(source) as batches:
        for batch in batches:
            if staged.corrupt:
                ledger = _corrupt_rows(batch, staged.end, day, staged.name)
            else:
                ledger = _split_batch(batch, loser_lines, details, writers, result.superseded)
            writers["rejected_traces"].add(ledger)
            result.reasons.update(zip(ledger.column("stage").to_pylist(), ledger.column("reason").to_pylist()))
    result.outputs = {name: w.close() for name, w in writers.items()}
    return result


def _split_batch(batch: pa.RecordBatch, loser_lines: np.ndarray, details: pa.ChunkedArray,
                 writers: dict[str, _TableWriter], superseded_fates: Counter) -> pa.Table:
    """Route one staged batch to the trace tables; returns its ledger rows."""
    trace = _trace_mask(batch).to_numpy(zero_copy_only=False)
    superseded = trace & np.isin(batch.column("source_line").to_numpy(), loser_lines)
    if superseded.any():  # few: the fates the checks gave them, to take back from the checks' counts
        fates = batch.select(["structural_label", "stage", "reason"]).filter(pa.array(superseded))
        superseded_fates.update(zip(*(fates.column(i).to_pylist() for i in range(3))))
    normalized = trace & ~superseded
    label = batch.column("structural_label")
    agentic = normalized & pc.fill_null(pc.equal(label, "agentic"), False).to_numpy(zero_copy_only=False)
    subtask = normalized & pc.fill_null(pc.equal(label, "subtask"), False).to_numpy(zero_copy_only=False)
    gated = agentic & pc.is_null(batch.column("stage")).to_numpy(zero_copy_only=False)
    table = pa.Table.from_batches([batch])
    for name, mask in (("normalized_traces", normalized), ("agentic_traces", agentic),
                       ("subtask_traces", subtask), ("gated_traces", gated)):
        if mask.any():  # select first: only the table's columns are copied
            writers[name].add(table.select(TABLE_SCHEMAS[name].names).filter(pa.array(mask)))
    ledger = ~(gated | subtask)
    ledger_rows = batch.select(list(LEDGER_SCHEMA.names)).filter(pa.array(ledger))
    return _ledger_table(ledger_rows, superseded[ledger], loser_lines, details)
