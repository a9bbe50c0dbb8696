"""The one list of reason codes a trace can be rejected with, and the rejection record.

Every line of a firehose day that does not reach `gated_traces` or `subtask_traces` becomes a
ledger row (`rejected_traces`) carrying one of these codes. Codes are short, stable and never
reused for another meaning: dashboards, tests and the docs key on them. Add a code here, with
its stage and a one-line meaning, before any code emits it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Stage(StrEnum):
    """Where in the flow a line was stopped (the ledger's `stage` column)."""

    READ = "read"
    NORMALIZE = "normalize"
    DEDUPE = "dedupe"
    STRUCTURAL = "structural"
    REASONING_GATE = "reasoning_gate"
    FORMAT_GATE = "format_gate"


class Reason(StrEnum):
    """Stable reason codes (the ledger's `reason` column)."""

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
    # structural filter
    NO_TOOL_CALLS = "no_tool_calls"
    NO_INFERENCE = "no_inference"
    STRUCTURAL_UNCLEAR = "structural_unclear"
    # reasoning gate
    REASONING_GATE = "reasoning_gate"
    NO_REASONING_SCORE = "no_reasoning_score"
    # format gate
    UNKNOWN_TOOL = "unknown_tool"
    MALFORMED_ARGUMENTS = "malformed_arguments"
    UNPAIRED_TOOL_CALL = "unpaired_tool_call"
    RECOMMEND_COUNT = "recommend_count"
    BAD_PRODUCT_IDS = "bad_product_ids"
    THINK_THEN_STOP = "think_then_stop"
    TOO_LONG = "too_long"


# (code, stage, meaning): the documented table; order is the order of the docs.
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
    (Reason.NO_TOOL_CALLS, Stage.STRUCTURAL, "the dialogue contains no tool call at all"),
    (Reason.NO_INFERENCE, Stage.STRUCTURAL, "the proxy log shows tool calls but no inference call: no LLM wrote any of it"),
    (Reason.STRUCTURAL_UNCLEAR, Stage.STRUCTURAL, "no proxy evidence to tell an agentic run from a sub-task one"),
    (Reason.REASONING_GATE, Stage.REASONING_GATE, "the judge's reasoning score is below the configured minimum"),
    (Reason.NO_REASONING_SCORE, Stage.REASONING_GATE, "a judged run has a null reasoning score (the judge failed "
                                                      "or never ran)"),
    (Reason.UNKNOWN_TOOL, Stage.FORMAT_GATE, "a tool call names a tool outside TOOL_SCHEMAS"),
    (Reason.MALFORMED_ARGUMENTS, Stage.FORMAT_GATE, "tool arguments are not a JSON object valid for the tool's schema"),
    (Reason.UNPAIRED_TOOL_CALL, Stage.FORMAT_GATE, "a tool call without its result, or a result without its call"),
    (Reason.RECOMMEND_COUNT, Stage.FORMAT_GATE, "not exactly one recommend_product call"),
    (Reason.BAD_PRODUCT_IDS, Stage.FORMAT_GATE, "recommend_product ids are not comma-separated digit strings"),
    (Reason.THINK_THEN_STOP, Stage.FORMAT_GATE, "an assistant turn ends with neither a tool call nor visible content"),
    (Reason.TOO_LONG, Stage.FORMAT_GATE, "the rendered trace exceeds the token limit"),
)

REASONS: dict[str, str] = {str(code): meaning for code, _, meaning in _TABLE}
REASON_STAGE: dict[str, str] = {str(code): str(stage) for code, stage, _ in _TABLE}
assert set(REASONS) == {str(r) for r in Reason}, "every Reason needs a row in _TABLE"


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a record or trace stops here; becomes a ledger row's stage/reason/detail."""

    stage: str
    reason: str
    detail: str = ""

    @classmethod
    def of(cls, reason: Reason, detail: str = "") -> Rejection:
        """A rejection whose stage is the reason's documented stage."""
        return cls(REASON_STAGE[reason], str(reason), detail)


def reasons_markdown() -> str:
    """The reason table as markdown, for the docs and the assets' metadata."""
    lines = ["| stage | reason | meaning |", "|---|---|---|"]
    lines += [f"| `{stage}` | `{code}` | {meaning} |" for code, stage, meaning in _TABLE]
    return "\n".join(lines) + "\n"
