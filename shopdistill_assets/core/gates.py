"""The two gates a structurally agentic trace passes before it becomes training data.

Reasoning gate: the validator's LLM judge scores each run's reasoning (0.1 … 0.9); keep
runs scored at least `min_reasoning_score`. Only the primary dialect is judged:
`shoppingbench.rollout` and `openai.messages` carry no judge score, so by default they pass
this gate (`missing_judge_policy="keep"`) and are held to the format gate alone; rejecting
them would drop whole dialects for lacking a field they never have. A primary run with a
null score is different: the validator should have judged it and did not (judge error,
timeout), so by default it is rejected as `no_reasoning_score`
(`null_reasoning_score_policy="reject"`); both policies are configurable.

Format gate: the hard rejects of the ORO paper, defined precisely:
  unknown_tool         a call names a tool outside TOOL_SCHEMAS
  malformed_arguments  arguments are not a JSON object, lack a required key, carry a key the
                       schema does not know (unless `allow_extra_arguments`), or a value of
                       the wrong type/range/enum/pattern (page an integer 1..5, price "lo-hi",
                       …); null is accepted for optional keys (the tools treat it as absent)
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
Checks run in that order; the first failure is the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson

from .dialects import PRIMARY, TOOL_SCHEMAS
from .reasons import Reason, Rejection, Stage
from .tokens import count_tokens, load_tokenizer

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


def reasoning_gate(row: dict, cfg: GateConfig | None = None) -> Rejection | None:
    """Reject when the judge's score is below the minimum, or missing where policy says so."""
    cfg = cfg or GateConfig()
    q = _number(row.get("reasoning_score"))
    if q is None:
        judged = row.get("dialect") in cfg.judged_dialects
        policy = cfg.null_reasoning_score_policy if judged else cfg.missing_judge_policy
        if policy == "keep":
            return None
        why = "judged dialect with a null reasoning_score" if judged else f"{row.get('dialect')} carries no judge score"
        return Rejection.of(Reason.NO_REASONING_SCORE, why)
    if q < cfg.min_reasoning_score - 1e-9:
        return Rejection.of(Reason.REASONING_GATE, f"reasoning_score {q:g} < {cfg.min_reasoning_score:g}")
    return None


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


def _value_error(key: str, v: Any, spec: dict) -> str | None:
    """Why the tool cannot take `v` for parameter `key`; None when it can. Only the type is
    checked: the server ignores values it does not understand (tool_specs.py)."""
    kinds = spec.get("type", ())
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    if kinds and not any(_takes(k, v) for k in kinds):
        return f"{key} must be {' or '.join(kinds)}, not {type(v).__name__}"
    return None


def argument_error(name: str, arguments: Any, allow_extra: bool = False) -> str | None:
    """Why `arguments` (JSON text) is not valid for tool `name`; None when it is."""
    params = TOOL_SCHEMAS[name]["function"]["parameters"]
    try:
        args = orjson.loads(arguments) if isinstance(arguments, str) else None
    except orjson.JSONDecodeError:
        args = None
    if not isinstance(args, dict):
        return "arguments are not a JSON object"
    for key in params["required"]:
        if args.get(key) is None:
            return f"missing required {key}"
    props = params["properties"]
    for key, v in args.items():
        spec = props.get(key)
        if spec is None:
            if allow_extra:
                continue
            return f"unknown argument {str(key)[:40]!r}"
        if v is None:
            continue  # optional and null: the tools treat it as absent
        err = _value_error(key, v, spec)
        if err:
            return err
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


def trace_tokens(messages: list[dict], tools_json: str, tokenizer: Any | None = None) -> int:
    """Tokens of the trace as a chat template would render it (tools in the system turn)."""
    parts = [tools_json or ""]
    overhead = MESSAGE_OVERHEAD_TOKENS * (len(messages) + 1)
    for m in messages:
        parts.append(m.get("content") or "")
        parts.append(m.get("reasoning_content") or "")
        for c in m.get("tool_calls") or []:
            parts.append(c["function"]["name"])
            parts.append(c["function"]["arguments"])
            overhead += CALL_OVERHEAD_TOKENS
    return overhead + count_tokens("\n".join(p for p in parts if isinstance(p, str)), tokenizer)


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


def _fail(reason: Reason, detail: str) -> Rejection:
    return Rejection(str(Stage.FORMAT_GATE), str(reason), detail)


def format_gate(
    row: dict, cfg: GateConfig | None = None, tokenizer: Any | None = None, *, messages: Any = None
) -> Rejection | None:
    """The first format failure of a canonical trace (order in the module doc), or None.

    `messages`: the row's `messages` column already parsed, if the caller has it (read only).
    """
    cfg = cfg or GateConfig()
    if messages is None:
        try:
            messages = orjson.loads(row.get("messages") or "null")
        except orjson.JSONDecodeError:
            messages = None
    calls = _calls(messages) if isinstance(messages, list) else "messages is not a JSON list"
    if isinstance(calls, str):
        return _fail(Reason.DIALECT_VIOLATION, calls)
    for c in calls:
        if c["function"]["name"] not in TOOL_SCHEMAS:
            return _fail(Reason.UNKNOWN_TOOL, f"tool {c['function']['name'][:60]!r}")
    for c in calls:
        err = argument_error(c["function"]["name"], c["function"].get("arguments"), cfg.allow_extra_arguments)
        if err:
            return _fail(Reason.MALFORMED_ARGUMENTS, f"{c['function']['name']}: {err}")
    if err := _pairing_error(messages):
        return _fail(Reason.UNPAIRED_TOOL_CALL, err)
    for i, m in enumerate(messages):
        content = m.get("content")
        if m.get("role") == "assistant" and not m.get("tool_calls") and not (isinstance(content, str) and content.strip()):
            return _fail(Reason.THINK_THEN_STOP, f"message {i} has no tool call and no content")
    recommends = [c for c in calls if c["function"]["name"] == "recommend_product"]
    if len(recommends) != 1:
        return _fail(Reason.RECOMMEND_COUNT, f"{len(recommends)} recommend_product calls")
    ids = orjson.loads(recommends[0]["function"]["arguments"]).get("product_ids")
    if parse_product_ids(ids) is None:
        return _fail(Reason.BAD_PRODUCT_IDS, f"product_ids={str(ids)[:80]!r}")
    if tokenizer is None and cfg.tokenizer_path:
        tokenizer = load_tokenizer(cfg.tokenizer_path)
    n = trace_tokens(messages, row.get("tools") or "", tokenizer)
    if n > cfg.max_tokens:
        return _fail(Reason.TOO_LONG, f"{n} tokens > {cfg.max_tokens}")
    return None
