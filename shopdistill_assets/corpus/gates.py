"""The two gates a structurally agentic trace passes before it becomes training data.

Reasoning gate: the validator's LLM judge scores each run's reasoning (0.1 … 0.9); keep
runs scored at least `min_reasoning_score`. Only the primary dialect is judged:
`shoppingbench.rollout`, `openai.messages` and ORO's own `oro.sandbox_output` / `oro.upload`
(written before the judge ran) carry no judge score, so by default they pass
this gate (`missing_judge_policy="keep"`) and are held to the format gate alone; rejecting
them would drop whole dialects for lacking a field they never have. A primary run with a
null score is different: the validator should have judged it and did not (judge error,
timeout), so by default it is rejected as `no_reasoning_score`
(`null_reasoning_score_policy="reject"`); both policies are configurable.

Format gate: the ORO paper's five hard rejects, and two checks that the trace is of tools
the corpus can carry, each a named `Check` in FORMAT_CHECKS:
  unknown_tool         a call names a tool outside TOOL_SCHEMAS
  malformed_arguments  what the real tool cannot take (sandbox/tool_specs.py): arguments not a
                       JSON object, a required parameter missing, a parameter the tool does not
                       have (unless `allow_extra_arguments`), or a value of a type it does not
                       take. Catalogue parameters travel as query text, so a string parameter
                       takes a number (shop_id 4908479) and page a string of digits ("2"); the
                       server ignores values it does not understand (a page out of range, an
                       unknown sort or service), so those are not rejects; null is absent
  unpaired_tool_call   a call not answered by exactly one tool message before the next
                       assistant turn, a tool message answering no pending call, or a call id
                       used twice. One exception: an unanswered final turn made only of
                       `terminate` calls (its result ends the episode and is never read;
                       ShoppingBench rollouts never record it)
  think_then_stop      an assistant turn with no tool call and no visible content, whatever
                       its reasoning: at the end it is the stop itself; mid-trace it teaches
                       the model to end a turn after thinking
  recommend_count      not exactly one recommend_product call in the trace
  bad_product_ids      that call's product_ids, split on commas and stripped, are not all
                       non-empty ASCII digit strings of at most 20 digits
  too_long             the trace, rendered, exceeds `max_tokens` (see tokens.py)
Checks run in that order; the first failure is the reason. The reasoning gate is two checks
too (REASONING_CHECKS: no_reasoning_score, then reasoning_gate).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from shopdistill_assets.core.tokens import count_tokens, load_tokenizer
from shopdistill_assets.corpus.dialects import PRIMARY, TOOL_SCHEMAS
from shopdistill_assets.corpus.reasons import FAILED, Check, Reason, Rejection, Stage, run_checks

Policy = Literal["keep", "reject"]
MESSAGE_OVERHEAD_TOKENS = 8  # role markers and separators of a chat template turn
CALL_OVERHEAD_TOKENS = 12  # <tool_call>{"name": …, "arguments": …}</tool_call> wrapping
MAX_PRODUCT_ID_DIGITS = 20


@dataclass(frozen=True)
class GateConfig:
    min_reasoning_score: float = 0.5
    judged_dialects: tuple[str, ...] = (PRIMARY,)
    missing_judge_policy: Policy = "keep"  # dialects that carry no judge score
    null_reasoning_score_policy: Policy = "reject"  # judged dialect, score null
    max_tokens: int = 14336
    tokenizer_path: str | None = None  # a local HF tokenizer; None: the conservative estimate
    allow_extra_arguments: bool = False


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v else None


def _no_reasoning_score(row: dict, cfg: GateConfig) -> str | None:
    if _number(row.get("reasoning_score")) is not None:
        return None
    judged = row.get("dialect") in cfg.judged_dialects
    if (cfg.null_reasoning_score_policy if judged else cfg.missing_judge_policy) == "keep":
        return None
    return "judged dialect with a null reasoning_score" if judged else f"{row.get('dialect')} carries no judge score"


def _below_min_reasoning(row: dict, cfg: GateConfig) -> str | None:
    q = _number(row.get("reasoning_score"))
    if q is None or q >= cfg.min_reasoning_score - 1e-9:
        return None
    return f"reasoning_score {q:g} < {cfg.min_reasoning_score:g}"


NO_REASONING_SCORE = Check("no_reasoning_score", Stage.REASONING_GATE,
                           "a judged run has a null reasoning score (the judge failed or never ran)", _no_reasoning_score)
REASONING_GATE = Check("reasoning_gate", Stage.REASONING_GATE,
                       "the judge's reasoning score is below the configured minimum", _below_min_reasoning)
REASONING_CHECKS: tuple[Check, ...] = (NO_REASONING_SCORE, REASONING_GATE)


def reasoning_gate(row: dict, cfg: GateConfig | None = None, counts: Counter | None = None) -> Rejection | None:
    """Reject when the judge's score is missing where policy says so, or below the minimum."""
    return run_checks(REASONING_CHECKS, row, cfg or GateConfig(), counts=counts)


_JSON_KINDS: dict[str, tuple[type, ...]] = {"string": (str,), "array": (list,), "object": (dict,),
                                            "boolean": (bool,)}


def _takes(kind: str, v: Any) -> bool:
    """Whether a tool parameter of JSON type `kind` takes `v` as the real tool does.

    Catalogue parameters travel as query text, so a string parameter takes a number too (a
    numeric shop_id) and an integer one a string of digits (page "2"); numbers are never bools.
    """
    if isinstance(v, bool):
        return kind == "boolean"
    if kind == "string":
        return isinstance(v, (str, int, float))
    if kind == "integer":
        return isinstance(v, int) or (isinstance(v, str) and v.strip().isascii() and v.strip().isdigit())
    if kind == "number":
        return isinstance(v, (int, float))
    return isinstance(v, _JSON_KINDS.get(kind, ()))


def _kinds(spec: dict) -> tuple[str, ...]:
    kinds = spec.get("type", ())
    return (kinds,) if isinstance(kinds, str) else tuple(kinds)


# Per tool: its required parameters, and each parameter's JSON types (read once from TOOL_SCHEMAS).
_PARAMETERS: dict[str, tuple[tuple[str, ...], dict[str, tuple[str, ...]]]] = {
    name: (tuple(schema["function"]["parameters"]["required"]),
           {key: _kinds(spec) for key, spec in schema["function"]["parameters"]["properties"].items()})
    for name, schema in TOOL_SCHEMAS.items()
}


def argument_error(name: str, arguments: Any, allow_extra: bool = False) -> str | None:
    """Why `arguments` (JSON text) is not valid for tool `name`; None when it is. Only the types
    are checked: the server ignores values it does not understand (tool_specs.py)."""
    required, kinds_of = _PARAMETERS[name]
    try:
        args = orjson.loads(arguments) if isinstance(arguments, str) else None
    except orjson.JSONDecodeError:
        args = None
    if not isinstance(args, dict):
        return "arguments are not a JSON object"
    for key in required:
        if args.get(key) is None:
            return f"missing required {key}"
    for key, v in args.items():
        kinds = kinds_of.get(key)
        if kinds is None:
            if allow_extra:
                continue
            return f"unknown argument {str(key)[:40]!r}"
        if v is None or not kinds or (type(v) is str and kinds[0] == "string"):
            continue  # null: the tools treat it as absent; a string where one is taken: the common case
        if not any(_takes(k, v) for k in kinds):
            return f"{key} must be {' or '.join(kinds)}, not {type(v).__name__}"
    return None


def parse_product_ids(text: Any) -> list[str] | None:
    """recommend_product ids as the validator reads them (comma-split, stripped); None if any is bad."""
    if not isinstance(text, str):
        return None
    ids = [p.strip() for p in text.split(",")]
    ok = all(p.isascii() and p.isdigit() and len(p) <= MAX_PRODUCT_ID_DIGITS for p in ids)
    return ids if ok and ids else None


def _pairing_error(messages: list[dict]) -> str | None:
    pending: dict[str, str] = {}  # id -> tool name of the latest assistant turn's open calls
    seen: set[str] = set()
    for m in messages:
        role = m.get("role")
        if role == "assistant":
            if pending:
                return f"call {next(iter(pending))!r} has no result"
            for c in m.get("tool_calls") or []:
                if c["id"] in seen:
                    return f"call id {c['id']!r} used twice"
                seen.add(c["id"])
                pending[c["id"]] = c["function"]["name"]
        elif role == "tool":
            if pending.pop(m.get("tool_call_id"), None) is None:
                return f"result for {str(m.get('tool_call_id'))[:40]!r} answers no open call"
    if pending and set(pending.values()) != {"terminate"}:
        return f"call {next(iter(pending))!r} has no result"
    return None


def _rendered(messages: list[dict], tools_json: str) -> tuple[list[str], int]:
    """The texts a chat template renders of the trace (tools in the system turn), and the
    tokens of its markup."""
    parts = [tools_json or ""]
    overhead = MESSAGE_OVERHEAD_TOKENS * (len(messages) + 1)
    for m in messages:
        parts.append(m.get("content") or "")
        parts.append(m.get("reasoning_content") or "")
        for c in m.get("tool_calls") or []:
            parts.append(c["function"]["name"])
            parts.append(c["function"]["arguments"])
            overhead += CALL_OVERHEAD_TOKENS
    return [p for p in parts if isinstance(p, str)], overhead


def trace_tokens(messages: list[dict], tools_json: str, tokenizer: Any | None = None) -> int:
    """Tokens of the trace as a chat template would render it (tools in the system turn)."""
    parts, overhead = _rendered(messages, tools_json)
    return overhead + count_tokens("\n".join(parts), tokenizer)


def _calls(messages: list[dict]) -> list[dict] | str:
    """Every tool call of the trace, or why the messages are not in the canonical shape."""
    calls = []
    for m in messages:
        if not isinstance(m, dict):
            return "a message is not an object"
        if m.get("role") != "assistant":
            continue
        raw = m.get("tool_calls") or []
        if not isinstance(raw, list):
            return "tool_calls is not a list"
        for c in raw:
            fn = c.get("function") if isinstance(c, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(c.get("id"), str):
                return "a tool call lacks id or function name"
            calls.append(c)
    return calls


@dataclass
class TraceUnderCheck:
    """What the format checks read: the canonical row, its messages parsed, every tool call."""

    row: dict
    messages: list[dict]
    calls: list[dict]
    cfg: GateConfig
    tokenizer: Any = None

    def recommends(self) -> list[dict]:
        return [c for c in self.calls if c["function"]["name"] == "recommend_product"]


def _unknown_tool(t: TraceUnderCheck) -> str | None:
    bad = next((c["function"]["name"] for c in t.calls if c["function"]["name"] not in TOOL_SCHEMAS), None)
    return None if bad is None else f"tool {bad[:60]!r}"


def _malformed_arguments(t: TraceUnderCheck) -> str | None:
    for c in t.calls:
        if err := argument_error(c["function"]["name"], c["function"].get("arguments"), t.cfg.allow_extra_arguments):
            return f"{c['function']['name']}: {err}"
    return None


def _think_then_stop(t: TraceUnderCheck) -> str | None:
    for i, m in enumerate(t.messages):
        content = m.get("content")
        if m.get("role") == "assistant" and not m.get("tool_calls") and not (isinstance(content, str) and content.strip()):
            return f"message {i} has no tool call and no content"
    return None


def _recommend_count(t: TraceUnderCheck) -> str | None:
    n = len(t.recommends())
    return None if n == 1 else f"{n} recommend_product calls"


def _bad_product_ids(t: TraceUnderCheck) -> str | None:
    ids = orjson.loads(t.recommends()[0]["function"]["arguments"]).get("product_ids")
    return None if parse_product_ids(ids) is not None else f"product_ids={str(ids)[:80]!r}"


def _too_long(t: TraceUnderCheck) -> str | None:
    tokenizer = t.tokenizer if t.tokenizer is not None or not t.cfg.tokenizer_path else load_tokenizer(t.cfg.tokenizer_path)
    parts, overhead = _rendered(t.messages, t.row.get("tools") or "")
    if tokenizer is None:
        # The estimate (core/tokens.py) counts a token per digit or per 3 other UTF-8 bytes: at
        # most one a character of ASCII text, 4/3 of one otherwise (a character is at most 4
        # bytes). A trace whose length bounds it under the limit needs no count.
        chars = sum(map(len, parts)) + len(parts)  # the joined text's length, and one
        if overhead + (chars if all(map(str.isascii, parts)) else -(-4 * chars // 3)) <= t.cfg.max_tokens:
            return None
    n = overhead + count_tokens("\n".join(parts), tokenizer)
    return f"{n} tokens > {t.cfg.max_tokens}" if n > t.cfg.max_tokens else None


_PAPER = " (an ORO paper hard-reject)"
# The format checks, in the order they run (the first failure is the reason); later checks
# may rely on earlier ones (bad_product_ids reads the one recommend_product's arguments).
FORMAT_CHECKS: tuple[Check, ...] = (
    Check("unknown_tool", Stage.FORMAT_GATE, "a tool call names a tool outside TOOL_SCHEMAS", _unknown_tool),
    Check("malformed_arguments", Stage.FORMAT_GATE,
          "tool arguments the real tool cannot take: not a JSON object, a missing required or unknown "
          "parameter, a value of a type the tool does not take", _malformed_arguments),
    Check("unpaired_tool_call", Stage.FORMAT_GATE,
          "a tool call without its result, or a result without its call" + _PAPER,
          lambda t: _pairing_error(t.messages)),
    Check("think_then_stop", Stage.FORMAT_GATE,
          "an assistant turn ends with neither a tool call nor visible content" + _PAPER, _think_then_stop),
    Check("recommend_count", Stage.FORMAT_GATE, "not exactly one recommend_product call" + _PAPER, _recommend_count),
    Check("bad_product_ids", Stage.FORMAT_GATE,
          "recommend_product ids are not comma-separated digit strings" + _PAPER, _bad_product_ids),
    Check("too_long", Stage.FORMAT_GATE, "the rendered trace exceeds the token limit" + _PAPER, _too_long),
)


# The format gate's guard before its checks (messages not in the canonical shape): its counter.
SHAPE_FAILED_KEY = (str(Stage.FORMAT_GATE), str(Reason.DIALECT_VIOLATION), FAILED)


def format_gate(
    row: dict, cfg: GateConfig | None = None, tokenizer: Any | None = None, *, messages: Any = None,
    counts: Counter | None = None,
) -> Rejection | None:
    """The first failing format check of a canonical trace (FORMAT_CHECKS order), or None.

    `messages`: the row's `messages` column already parsed, if the caller has it (read only).
    `counts`: see reasons.run_checks (and SHAPE_FAILED_KEY for the guard).
    """
    if messages is None:
        try:
            messages = orjson.loads(row.get("messages") or "null")
        except orjson.JSONDecodeError:
            messages = None
    calls = _calls(messages) if isinstance(messages, list) else "messages is not a JSON list"
    if isinstance(calls, str):  # not the canonical shape a reader writes: a bug or a hand-made row
        if counts is not None:
            counts[SHAPE_FAILED_KEY] += 1
        return Rejection(str(Stage.FORMAT_GATE), str(Reason.DIALECT_VIOLATION), calls)
    trace = TraceUnderCheck(row, messages, calls, cfg or GateConfig(), tokenizer)
    return run_checks(FORMAT_CHECKS, trace, counts=counts)
