"""Firehose lines -> canonical trace rows and ledger rows, streaming, plus in-day dedupe.

Per line the work is one typed decode (msgspec, dialects/shapes.py) for the primary dialect,
or one generic `orjson.loads` for the others, a dialect test, and the reader's walk over the
steps (no pydantic, no deep copies, no regular expressions over whole records), so the
normalizer keeps a fair fraction of bare-parse speed. Every line yields exactly one row:
a canonical trace or a ledger row (the conservation check counts on it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Literal

import msgspec
import orjson
import polars as pl

from shopdistill_assets.core.recency import latest_copy
from shopdistill_assets.corpus.dialects import DIALECTS, PRIMARY, CanonicalTrace, detect_dialect, record_identity
from shopdistill_assets.corpus.dialects.shapes import PROBLEM_RUN, ProblemRun, is_problem_run
from shopdistill_assets.corpus.lines import MAX_LINE_BYTES, RAW_LINE_LIMIT
from shopdistill_assets.corpus.reasons import Reason, Rejection

__all__ = ["LEDGER_COLUMNS", "MAX_LINE_BYTES", "RAW_LINE_LIMIT", "LedgerRow", "dedupe_within_day", "iter_records",
           "ledger_row", "ledger_row_for_trace", "normalize_lines", "normalize_record", "parse_line",
           "superseded_detail"]

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


def parse_line(raw: bytes) -> Any | Rejection:
    """One raw line -> its value, or the read-stage rejection. A well-shaped primary record
    comes back typed (dialects.shapes.ProblemRun, decoded straight from the bytes); any other
    line, a hostile primary one included, as its generic JSON value."""
    if len(raw) > MAX_LINE_BYTES:  # the line reader never hands these out; a direct caller might
        return Rejection.of(Reason.LINE_TOO_LARGE, f"{len(raw)} bytes > {MAX_LINE_BYTES}")
    if not raw or raw.isspace():  # isspace stops at the first byte of a real line; strip copies
        return Rejection.of(Reason.EMPTY_LINE)
    if not raw.isascii():  # msgspec does not check the UTF-8 of the fields it skips: check it first
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as err:
            return Rejection.of(Reason.BAD_ENCODING, f"invalid UTF-8 at byte {err.start}")
    try:
        run = PROBLEM_RUN.decode(raw)
        if is_problem_run(run):
            return run
    except (msgspec.MsgspecError, RecursionError):
        pass  # another dialect, a hostile record, too deep, or not JSON: the generic decode says which
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        return Rejection.of(Reason.JSON_DECODE, str(err)[:200])


def normalize_record(obj: Any, *, day: str, source_file: str, source_line: int,
                     parsed: dict | None = None) -> CanonicalTrace | Rejection:
    """One parsed JSON value -> canonical row or rejection; never raises.

    `parsed`, when given, receives the row's `messages` (and, for the primary dialect, its
    proxy `evidence`) as Python objects, so later stages need not parse the JSON text again.
    """
    if isinstance(obj, ProblemRun):
        return _read(PRIMARY, obj, day, source_file, source_line, parsed)
    if not isinstance(obj, (dict, list)):
        return Rejection.of(Reason.NOT_AN_OBJECT, f"top-level JSON {type(obj).__name__}")
    name = detect_dialect(obj)
    if name is None:
        schema = obj.get("schema") if isinstance(obj, dict) else None
        hint = f"schema={str(schema)[:80]!r}" if schema is not None else f"top-level {type(obj).__name__}"
        return Rejection.of(Reason.UNKNOWN_DIALECT, hint)
    return _read(name, obj, day, source_file, source_line, parsed)


def _read(name: str, obj: Any, day: str, source_file: str, source_line: int,
          parsed: dict | None) -> CanonicalTrace | Rejection:
    try:
        return DIALECTS[name].read(obj, day=day, source_file=source_file, source_line=source_line, parsed=parsed)
    except Exception as err:  # a reader bug must cost one ledger row, never the day
        return Rejection.of(Reason.READER_ERROR, f"{name}: {type(err).__name__}: {str(err)[:200]}")


def iter_records(
    lines: Iterable[tuple[str, int, bytes]], day: str
) -> Iterator[tuple[Literal["trace", "rejected"], CanonicalTrace | LedgerRow]]:
    """Yield ("trace", canonical row) or ("rejected", ledger row), one per input line.

    `lines` holds (source_file, source_line, raw bytes) with 1-based line numbers.
    """
    for source_file, source_line, raw in lines:
        obj = parse_line(raw)
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


def dedupe_within_day(rows: list[CanonicalTrace]) -> tuple[list[CanonicalTrace], list[LedgerRow]]:
    """Keep, per trace_id, the latest copy (core/recency.py: updated_at, then file, then line).

    Kept rows stay in input order; each loser becomes a `superseded` ledger row naming its winner.
    """
    if not rows:
        return [], []
    keys = pl.DataFrame({"trace_id": [r["trace_id"] for r in rows], "updated_at": [r.get("updated_at") for r in rows],
                         "source_file": [r["source_file"] for r in rows], "source_line": [r["source_line"] for r in rows]},
                        schema={"trace_id": pl.String, "updated_at": pl.String, "source_file": pl.String,
                                "source_line": pl.Int64})
    kept, superseded = [], []
    for row, latest in zip(rows, latest_copy(keys).to_list()):
        winner = rows[latest]
        if winner is row:
            kept.append(row)
            continue
        superseded.append(ledger_row_for_trace(row, Rejection.of(Reason.SUPERSEDED, superseded_detail(winner, row))))
    return kept, superseded


def superseded_detail(winner: dict, loser: dict) -> str:
    return (f"superseded by {winner['source_file']}:{winner['source_line']} "
            f"(updated_at {winner.get('updated_at')} vs {loser.get('updated_at')})")
