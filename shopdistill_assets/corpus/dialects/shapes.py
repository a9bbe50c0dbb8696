"""ORO's record shapes as msgspec Structs: the typed decode of the firehose's main lines.

The types are the shape checks, declared once: a primary record (`sn15.problem_run/v1`) is
decoded straight from its bytes into `ProblemRun`, and the steps every ORO shape carries (the
joined record, the sandbox envelope, the bare upload, upstream's rollout) are `Step`s. Only
the fields the pipeline reads are declared; msgspec skips the rest without building them (an
inference call's prompt and a search call's result list are most of a record's bytes).

Two kinds of field:
- *decided on* (identity, status, scores, the dialogue, a step's completion, message, think,
  response and tool calls, a call's name): a precise type. A record that breaks one fails
  its decode; `shape_rejection` turns msgspec's error (which names the path) into the ledger's
  reason: `dialect_violation` where the step or call itself is not what a step or call is,
  `bad_field_type` for a field of the wrong type.
- *tolerated* (timestamps, problem metadata, the proxy log, extra_info): `Loose[...]`, which
  takes any JSON value. A reader uses the value only when it has the expected type and
  otherwise treats it as absent, exactly as before the typed decode.

Lines that are not well-shaped primary records (another dialect, or a hostile primary) are
decoded generically (normalize.parse_line) and, where they hold ORO steps, converted to these
types with `msgspec.convert`: one step reader for every shape.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Union

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from shopdistill_assets.core.identity import MAX_ID_CHARS
from shopdistill_assets.corpus.dialects.common import PRIMARY
from shopdistill_assets.corpus.reasons import Reason, Rejection


def _loose(t: Any) -> Any:
    """`t` or any other JSON value: the reader checks the type and ignores a stranger."""
    other = dict if getattr(t, "__origin__", None) is list else list  # a union holds one of each kind
    return Union[t, other, str, int, float, bool, None]  # noqa: UP007 (a runtime type for msgspec)


Id = Annotated[str, Meta(max_length=MAX_ID_CHARS)]
UnitScore = Annotated[float, Meta(ge=0.0, le=1.0)]
Name = Annotated[str, Meta(min_length=1)]


class ToolCall(Struct, frozen=True):
    """`{name, parameters, tool_call_id, result?}`: ORO's call, its result riding on it."""

    name: Name
    parameters: Any = msgspec.field(default_factory=dict)
    tool_call_id: Any = None
    result: Any = UNSET  # absent -> no tool turn (an unpaired call)


class Message(Struct, frozen=True):
    think: str | None = None
    response: str | None = None
    tool_call: list[ToolCall] | None = None


class Completion(Struct, frozen=True):
    message: Message | None = None
    reasoning_content: Raw = Raw(b"null")  # read only when think is empty: left undecoded
    content: Raw = Raw(b"null")


class Usage(Struct, frozen=True):
    completion_tokens: Any = None


class ChoiceMessage(Struct, frozen=True):
    content: Any = None
    tool_calls: Any = None


class Choice(Struct, frozen=True):
    message: _loose(ChoiceMessage) = None


class InferenceResponse(Struct, frozen=True):
    usage: _loose(Usage) = None
    choices: _loose(list[_loose(Choice)]) = None


class RequestBody(Struct, frozen=True):
    max_tokens: Any = None
    max_completion_tokens: Any = None
    tools: Any = None
    response_format: Any = None


class ProxyCall(Struct, frozen=True):
    """One entry of a step's proxy log (src/agent/proxy_client.py RequestLog)."""

    path: Any = None
    kind: Any = "summary"
    timestamp: Any = None
    json_data: _loose(RequestBody) = None
    # An inference call's response is an object: its usage and first choice are decoded with
    # the record, the rest skipped. A search call's is a list of products (most of the log's
    # bytes): its items are skipped, left undecoded.
    response: Union[InferenceResponse, list[Raw], str, int, float, bool, None] = None  # noqa: UP007
    response_truncated: Any = None
    response_length: Any = None


class ExtraInfo(Struct, frozen=True):
    step: Any = None
    query: Any = None
    timestamp: Any = None
    problem_id: Any = None
    execution_time: Any = None
    proxy_calls: _loose(list[_loose(ProxyCall)]) = None


class Step(Struct, frozen=True):
    completion: Completion
    extra_info: _loose(ExtraInfo) = None


class Problem(Struct, frozen=True):
    query: Any = None
    category: Any = None
    difficulty: Any = None


class ProblemRun(Struct, frozen=True):
    """`sn15.problem_run/v1` (contracts/sn15-firehose.md): what the pipeline reads of it."""

    schema: Any = None
    eval_run_id: Id | None | UnsetType = UNSET
    problem_id: Id | None = None
    miner_hotkey: Id | None = None
    validator_hotkey: Id | None = None
    agent_version_id: Id | None = None
    race_id: Any = None
    suite_id: Any = None
    phase: str | None = None
    status: str | None = None
    problem: Problem | None = None
    score: UnitScore | None = None
    reasoning_score: UnitScore | None = None
    execution_time: Any = None
    inference_total: Any = None
    inference_failure_count: Any = None
    updated_at: Any = None
    dialogue: list[Step] | None | UnsetType = UNSET


EMPTY_EXTRA = ExtraInfo()
EMPTY_PROBLEM = Problem()
PROBLEM_RUN = msgspec.json.Decoder(ProblemRun)
STEPS = list[Step]

# ---- a failed decode -> the ledger's reason -----------------------------------------------

_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
# Paths where the value is not a step, a completion or a call at all: the record breaks the
# dialect itself. Every other failed field is a field of the wrong type.
_NOT_THE_DIALECT = re.compile(r"(\[\d+\]|\.completion|\.tool_call\[\d+\]|\.name)$")


def shape_rejection(err: msgspec.ValidationError, root: str = "") -> Rejection:
    """The rejection for a record (or its `root` part, e.g. "dialogue") that failed its types."""
    m = _AT.match(str(err))
    what, path = (m.group("what"), m.group("path") or "") if m else (str(err), "")
    if path.startswith(".") and not root:
        path = path[1:]
    where = f"{root}{path}" or "the record"
    if "missing required field" in what or _NOT_THE_DIALECT.search(path):
        return Rejection.of(Reason.DIALECT_VIOLATION, f"{where}: {what[:200]}")
    return Rejection.of(Reason.BAD_FIELD_TYPE, f"{where}: {what[:200]}")


def raw_text(raw: Raw) -> str | None:
    """A lazily kept field's value when it is a string, else None (the Raw is valid JSON)."""
    value = msgspec.json.decode(raw)
    return value if type(value) is str else None


_DECODERS: dict[Any, msgspec.json.Decoder] = {}


def typed(obj: Any, shape: Any) -> Any:
    """A generically decoded value as `shape` (raises msgspec.ValidationError). Written out and
    decoded again, not `msgspec.convert`: the lazily kept (Raw) fields exist only in a decode.
    Only for the rarer shapes (envelope, upload, rollout, a hostile primary record)."""
    decoder = _DECODERS.get(shape)
    if decoder is None:
        decoder = _DECODERS[shape] = msgspec.json.Decoder(shape)
    try:
        data = msgspec.json.encode(obj)
    except (TypeError, ValueError, OverflowError, RecursionError) as err:
        raise msgspec.ValidationError(f"cannot be written as JSON ({type(err).__name__})") from None
    try:
        return decoder.decode(data)
    except RecursionError:
        raise msgspec.ValidationError("nested too deeply") from None


def is_problem_run(run: ProblemRun) -> bool:
    """The primary dialect's shape test (dialects._is_primary) on the typed record."""
    return run.schema == PRIMARY or (run.schema is None and run.eval_run_id is not UNSET
                                     and run.dialogue is not UNSET)
