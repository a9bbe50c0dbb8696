"""The reason codes a trace can be rejected with, the named checks behind them, and the rejection record.

Every line of a firehose day that does not reach `gated_traces` or `subtask_traces` becomes a
ledger row (`rejected_traces`) carrying one of these codes. Codes are short, stable and never
reused for another meaning: dashboards, tests and the docs key on them.

Two kinds of code, one table (`reason_table()`, which the docs' table and the funnel's zero
counts are generated from):
- codes the line reader and the dialect readers stop a line with (read, normalize, dedupe):
  `Reason` and `_TABLE` below;
- codes of the trace checks (structural filter, reasoning gate, format gate): each is a
  `Check` declared beside its test (corpus/structural.py, corpus/gates.py), and the order of those
  lists is the order the checks run in. A new gate reason is one `Check` in its list (plus
  its test and the regenerated docs table).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from typing import Any


class Stage(StrEnum):
    """Where in the flow a line was stopped (the ledger's `stage` column)."""

    READ = "read"
    NORMALIZE = "normalize"
    DEDUPE = "dedupe"
    STRUCTURAL = "structural"
    REASONING_GATE = "reasoning_gate"
    FORMAT_GATE = "format_gate"


class Reason(StrEnum):
    """The reason codes emitted outside the trace checks (the ledger's `reason` column)."""

    # read: the line never became a JSON value
    EMPTY_LINE = "empty_line"
    LINE_TOO_LARGE = "line_too_large"
    BAD_ENCODING = "bad_encoding"
    JSON_DECODE = "json_decode"
    NOT_AN_OBJECT = "not_an_object"
    TRUNCATED_FILE = "truncated_file"
    CORRUPT_FILE = "corrupt_file"
    READ_ERROR = "read_error"
    # normalize: a JSON value that is not a usable trace
    UNKNOWN_DIALECT = "unknown_dialect"
    DIALECT_VIOLATION = "dialect_violation"
    MISSING_QUERY = "missing_query"
    EMPTY_DIALOGUE = "empty_dialogue"
    FAILED_RUN = "failed_run"
    ENVIRONMENT_EPISODE = "environment_episode"
    BAD_FIELD_TYPE = "bad_field_type"
    OVER_LIMIT = "over_limit"
    READER_ERROR = "reader_error"
    # dedupe
    SUPERSEDED = "superseded"


# (code, stage, meaning) of the codes emitted outside the checks, in the docs' order.
_TABLE: tuple[tuple[Reason, Stage, str], ...] = (
    (Reason.EMPTY_LINE, Stage.READ, "the line is empty or only whitespace"),
    (Reason.LINE_TOO_LARGE, Stage.READ, "the line exceeds the reader's size limit; not parsed"),
    (Reason.BAD_ENCODING, Stage.READ, "the line is not valid UTF-8"),
    (Reason.JSON_DECODE, Stage.READ, "the line is not one valid JSON value (e.g. cut off mid-line)"),
    (Reason.NOT_AN_OBJECT, Stage.READ, "the line is valid JSON but neither an object nor an array"),
    (Reason.TRUNCATED_FILE, Stage.READ, "the compressed file ended early; the partial last line is logged"),
    (Reason.CORRUPT_FILE, Stage.READ, "the file failed its integrity check (gzip CRC, zstd checksum, bad data): "
                                      "every line of it lands here, none is trusted"),
    (Reason.READ_ERROR, Stage.READ, "the file could not be read past this point (I/O or codec error)"),
    (Reason.UNKNOWN_DIALECT, Stage.NORMALIZE, "the record matches none of the known dialects"),
    (Reason.DIALECT_VIOLATION, Stage.NORMALIZE, "the record breaks its dialect's shape (detail says where)"),
    (Reason.MISSING_QUERY, Stage.NORMALIZE, "no problem text (query) could be found"),
    (Reason.EMPTY_DIALOGUE, Stage.NORMALIZE, "a finished run with no steps"),
    (Reason.FAILED_RUN, Stage.NORMALIZE, "ORO did not finish the run (status FAILED, TIMED_OUT, SKIPPED, …; an "
                                         "upload of [] is such a run): scored 0, never judged"),
    (Reason.ENVIRONMENT_EPISODE, Stage.NORMALIZE, "an ORO generated-environment episode "
                                                  "(oro.environment_episode.v1): recognized, holds no shopping dialogue"),
    (Reason.BAD_FIELD_TYPE, Stage.NORMALIZE, "a field the pipeline decides on has the wrong type or range"),
    (Reason.OVER_LIMIT, Stage.NORMALIZE, "the record exceeds a per-record work limit (steps, messages, tool "
                                         "calls, query size); detail says which"),
    (Reason.READER_ERROR, Stage.NORMALIZE, "the dialect reader failed unexpectedly (a bug; the record is kept here)"),
    (Reason.SUPERSEDED, Stage.DEDUPE, "a later upload of the same run (same trace_id) won within the day"),
)


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a record or trace stops here; becomes a ledger row's stage/reason/detail."""

    stage: str
    reason: str
    detail: str = ""

    @classmethod
    def of(cls, reason: str, detail: str = "") -> Rejection:
        """A rejection whose stage is the reason's documented stage."""
        return cls(_reason_stage()[reason], str(reason), detail)


PASSED, FAILED = "passed", "failed"  # a check's two counters


@dataclass(frozen=True, eq=False)
class Check:
    """One named check of the flow (the datatrove habit): its reason code, its stage, what a
    failure means, and its test. `test(*args)` returns the failure's detail, or None when the
    check passes; checks decided by a classifier (the structural filter) have no test and are
    rejected through `reject`."""

    reason: str
    stage: Stage
    meaning: str
    test: Callable[..., str | None] | None = None
    # Its counters' keys in a funnel Counter, (stage, reason, PASSED | FAILED): built once.
    passed_key: tuple[str, str, str] = field(init=False, repr=False)
    failed_key: tuple[str, str, str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "passed_key", (str(self.stage), self.reason, PASSED))
        object.__setattr__(self, "failed_key", (str(self.stage), self.reason, FAILED))

    def __call__(self, *args: Any) -> Rejection | None:
        assert self.test is not None, f"{self.reason} is decided by its stage, not tested alone"
        detail = self.test(*args)
        return None if detail is None else self.reject(detail)

    def reject(self, detail: str = "") -> Rejection:
        return Rejection(str(self.stage), self.reason, detail)


def run_checks(checks: Sequence[Check], *args: Any, counts: Counter | None = None) -> Rejection | None:
    """The first failing check of `checks` (in order) on `args`, or None. `counts`, when given,
    counts each check run (see count_run): the stage's funnel."""
    for check in checks:
        rejection = check(*args)
        if rejection is not None:
            if counts is not None:
                count_run(checks, check.reason, counts)
            return rejection
    if counts is not None:
        count_run(checks, None, counts)
    return None


def count_run(checks: Sequence[Check], failed: str | None, counts: Counter, n: int = 1) -> None:
    """Count `n` traces' run through `checks` (in order) into `counts`, keyed (stage, reason,
    PASSED | FAILED): every check before the one whose reason is `failed` passed, that one
    failed, none after it ran; `failed` None: all passed. A negative `n` takes runs back out
    (the copies a later upload superseded, corpus/check_funnel.py)."""
    for check in checks:
        if check.reason == failed:
            counts[check.failed_key] += n
            return
        counts[check.passed_key] += n
    if failed is not None:
        raise ValueError(f"{failed!r} is not one of the checks {[c.reason for c in checks]}")


def trace_checks() -> tuple[Check, ...]:
    """Every trace check, in the order a trace meets them: structural, reasoning gate, format gate."""
    from shopdistill_assets.corpus.gates import FORMAT_CHECKS, REASONING_CHECKS  # the checks import this module: late
    from shopdistill_assets.corpus.structural import STRUCTURAL_CHECKS

    return (*STRUCTURAL_CHECKS, *REASONING_CHECKS, *FORMAT_CHECKS)


@cache
def reason_table() -> tuple[tuple[str, str, str], ...]:
    """(code, stage, meaning) of every reason, in flow order: the one documented table."""
    rows = [(str(code), str(stage), meaning) for code, stage, meaning in _TABLE]
    rows += [(c.reason, str(c.stage), c.meaning) for c in trace_checks()]
    stage_order = list(Stage)
    rows.sort(key=lambda r: stage_order.index(Stage(r[1])))  # stable: within a stage, declared order
    assert len({r[0] for r in rows}) == len(rows), "a reason code is declared twice"
    return tuple(rows)


@cache
def _reason_stage() -> dict[str, str]:
    return {code: stage for code, stage, _ in reason_table()}


def __getattr__(name: str) -> Any:
    """`REASONS` (code -> meaning) and `REASON_STAGE` (code -> stage), built on first use from
    `reason_table()` (module attributes computed late: the check lists import this module)."""
    if name == "REASONS":
        return {code: meaning for code, _, meaning in reason_table()}
    if name == "REASON_STAGE":
        return dict(_reason_stage())
    raise AttributeError(name)


def reasons_markdown() -> str:
    """The reason table as markdown, for the docs and the assets' metadata."""
    lines = ["| stage | reason | meaning |", "|---|---|---|"]
    lines += [f"| `{stage}` | `{code}` | {meaning} |" for code, stage, meaning in reason_table()]
    return "\n".join(lines) + "\n"
