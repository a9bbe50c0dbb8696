"""Firehose lines -> canonical trace rows and ledger rows, streaming, plus in-day dedupe.

Per line the work is one `orjson.loads`, a dialect test, and the reader's walk over the
steps (no pydantic, no deep copies, no regular expressions over whole records), so the
normalizer keeps a fair fraction of bare-parse speed. Every line yields exactly one row:
a canonical trace or a ledger row (the conservation check counts on it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, Literal

import orjson

from .dialects import DIALECTS, CanonicalTrace, detect_dialect, record_identity
from .reasons import Reason, Rejection

RAW_LINE_LIMIT = 64 * 1024  # bytes of the raw line a ledger row keeps
MAX_LINE_BYTES = 64 * 1024 * 1024  # longer lines are not parsed at all

LedgerRow = dict[str, Any]
LEDGER_COLUMNS: tuple[str, ...] = (
    "trace_id", "eval_run_id", "problem_id", "miner_hotkey", "day", "source_file", "source_line",
    "stage", "reason", "detail", "raw_line",
)


def _raw_text(raw: bytes | None) -> tuple[str | None, str]:
    """(raw line kept in the ledger, note on truncation)."""
    if raw is None:
        return None, ""
    note = f" [raw line {len(raw)} bytes, kept {RAW_LINE_LIMIT}]" if len(raw) > RAW_LINE_LIMIT else ""
    return raw[:RAW_LINE_LIMIT].decode("utf-8", "replace"), note


def ledger_row(
    rejection: Rejection, *, day: str, source_file: str, source_line: int,
    raw: bytes | None = None, identity: dict[str, Any] | None = None,
) -> LedgerRow:
    """One `rejected_traces` row. `identity` supplies trace_id/eval_run_id/problem_id/miner_hotkey."""
    ident = identity or {}
    raw_line, note = _raw_text(raw)
    return {
        "trace_id": ident.get("trace_id"),
        "eval_run_id": ident.get("eval_run_id"),
        "problem_id": ident.get("problem_id"),
        "miner_hotkey": ident.get("miner_hotkey"),
        "day": day,
        "source_file": source_file,
        "source_line": source_line,
        "stage": rejection.stage,
        "reason": rejection.reason,
        "detail": rejection.detail + note,
        "raw_line": raw_line,
    }


def ledger_row_for_trace(row: CanonicalTrace | dict, rejection: Rejection) -> LedgerRow:
    """A ledger row for a canonical trace stopped by a later stage (no raw line kept there)."""
    return ledger_row(
        rejection, day=row["day"], source_file=row["source_file"], source_line=row["source_line"], identity=row
    )


def _parse(raw: bytes) -> Any | Rejection:
    if len(raw) > MAX_LINE_BYTES:
        return Rejection.of(Reason.LINE_TOO_LARGE, f"{len(raw)} bytes > {MAX_LINE_BYTES}")
    if not raw or raw.isspace():  # isspace stops at the first byte of a real line; strip copies
        return Rejection.of(Reason.EMPTY_LINE)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as uerr:
            return Rejection.of(Reason.BAD_ENCODING, f"invalid UTF-8 at byte {uerr.start}")
        return Rejection.of(Reason.JSON_DECODE, str(err)[:200])


def normalize_record(obj: Any, *, day: str, source_file: str, source_line: int) -> CanonicalTrace | Rejection:
    """One parsed JSON value -> canonical row or rejection; never raises."""
    if not isinstance(obj, (dict, list)):
        return Rejection.of(Reason.NOT_AN_OBJECT, f"top-level JSON {type(obj).__name__}")
    name = detect_dialect(obj)
    if name is None:
        schema = obj.get("schema") if isinstance(obj, dict) else None
        hint = f"schema={str(schema)[:80]!r}" if schema is not None else f"top-level {type(obj).__name__}"
        return Rejection.of(Reason.UNKNOWN_DIALECT, hint)
    try:
        return DIALECTS[name].read(obj, day=day, source_file=source_file, source_line=source_line)
    except Exception as err:  # a reader bug must cost one ledger row, never the day
        return Rejection.of(Reason.READER_ERROR, f"{name}: {type(err).__name__}: {str(err)[:200]}")


def iter_records(
    lines: Iterable[tuple[str, int, bytes]], day: str
) -> Iterator[tuple[Literal["trace", "rejected"], CanonicalTrace | LedgerRow]]:
    """Yield ("trace", canonical row) or ("rejected", ledger row), one per input line.

    `lines` holds (source_file, source_line, raw bytes) with 1-based line numbers.
    """
    for source_file, source_line, raw in lines:
        obj = _parse(raw)
        if isinstance(obj, Rejection):
            yield "rejected", ledger_row(obj, day=day, source_file=source_file, source_line=source_line, raw=raw)
            continue
        out = normalize_record(obj, day=day, source_file=source_file, source_line=source_line)
        if isinstance(out, Rejection):
            yield "rejected", ledger_row(
                out, day=day, source_file=source_file, source_line=source_line,
                raw=raw, identity=record_identity(obj),
            )
        else:
            yield "trace", out


def normalize_lines(
    lines: Iterable[tuple[str, int, bytes]], day: str
) -> tuple[list[CanonicalTrace], list[LedgerRow]]:
    """All of a day's lines -> (canonical rows, ledger rows), each in input order."""
    rows: list[CanonicalTrace] = []
    rejected: list[LedgerRow] = []
    for kind, row in iter_records(lines, day):
        (rows if kind == "trace" else rejected).append(row)  # type: ignore[arg-type]
    return rows, rejected


def _recency(row: CanonicalTrace | dict) -> tuple[datetime, str, int]:
    """Sort key: updated_at (missing sorts first), then file and line; later wins."""
    ts = row.get("updated_at")
    try:
        when = datetime.fromisoformat(ts) if ts else datetime.min
    except ValueError:
        when = datetime.min
    return when.replace(tzinfo=None), row["source_file"], row["source_line"]


def dedupe_within_day(rows: list[CanonicalTrace]) -> tuple[list[CanonicalTrace], list[LedgerRow]]:
    """Keep, per trace_id, the row with the latest updated_at (tie: later source_file, then line).

    Kept rows stay in input order; each loser becomes a `superseded` ledger row naming its winner.
    """
    best: dict[str, CanonicalTrace] = {}
    for row in rows:
        cur = best.get(row["trace_id"])
        if cur is None or _recency(row) > _recency(cur):
            best[row["trace_id"]] = row
    kept, superseded = [], []
    for row in rows:
        winner = best[row["trace_id"]]
        if winner is row:
            kept.append(row)
            continue
        detail = (
            f"superseded by {winner['source_file']}:{winner['source_line']} "
            f"(updated_at {winner.get('updated_at')} vs {row.get('updated_at')})"
        )
        superseded.append(ledger_row_for_trace(row, Rejection.of(Reason.SUPERSEDED, detail)))
    return kept, superseded
