"""Dialect readers: one firehose record (a parsed JSON value) -> a canonical trace row.

Three dialects are read (contracts/sn15-firehose.md): the primary `sn15.problem_run/v1`,
upstream `shoppingbench.rollout`, and already-canonical `openai.messages`. Each is detected
per record, never per file. A reader never raises on hostile input and never trusts a type:
whatever the record holds, it returns either a canonical row (a plain dict, see
`CanonicalTrace`) or a `Rejection`. Readers judge only *shape*; whether a well-shaped trace is
good training data is for the structural filter and the gates.

The tool schemas come from `sandbox.tool_specs.TOOL_SCHEMAS`, the single source: the canonical
`tools` column, the format gate and the sandbox all read it.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypedDict

import orjson

from shopdistill_assets.sandbox.tool_specs import TOOL_SCHEMAS

from .reasons import Reason, Rejection

PRIMARY = "sn15.problem_run/v1"
ROLLOUT = "shoppingbench.rollout"
OPENAI = "openai.messages"

# Fixed system prompt of primary-dialect traces: the record does not carry the agent's own
# prompt, and one shared prompt lets the student learn the tools, not a miner's wording.
SYSTEM_PROMPT = (
    "You are a shopping assistant for an online marketplace (prices in PHP). Use the tools to "
    "search the catalog and inspect products, reason about the candidates against every "
    "requirement of the user's request, call recommend_product exactly once with the "
    "comma-separated product ids that fit, then call terminate."
)

_TOOL_JSON: dict[str, str] = {name: orjson.dumps(s).decode() for name, s in TOOL_SCHEMAS.items()}
# Tools whose calls go to the validator's proxy as /search/<tool> (the structural evidence).
CATALOGUE_TOOLS = frozenset(
    {"find_product", "view_product_information", "check_product_match", "find_products_in_same_shop", "calculate_voucher"}
)


class CanonicalTrace(TypedDict):
    """One normalized row (HELPERS-BRIEF "Canonical trace row"); JSON columns are text."""

    trace_id: str
    eval_run_id: str | None
    problem_id: str | None
    miner_hotkey: str | None
    validator_hotkey: str | None
    agent_version_id: str | None
    race_id: int | None
    suite_id: int | None
    phase: str | None
    status: str | None
    category: str | None
    difficulty: str | None
    query: str
    score: float | None
    reasoning_score: float | None
    reasoning_coef: float | None
    execution_time: float | None
    inference_total: int | None
    inference_failure_count: int | None
    n_steps: int
    n_tool_calls: int
    updated_at: str | None
    dialect: str
    day: str
    source_file: str
    source_line: int
    messages: str
    tools: str
    proxy_evidence: str | None


CANONICAL_COLUMNS: tuple[str, ...] = tuple(CanonicalTrace.__annotations__)
MAX_ID_CHARS = 256  # identity strings longer than this are hostile, not ids


# ---- small, type-distrusting accessors -------------------------------------------------


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _int(v: Any) -> int | None:
    return v if type(v) is int and _I64_MIN <= v <= _I64_MAX else None  # bool is not int here


def _float(v: Any) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def _dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def make_trace_id(*parts: str) -> str:
    """Deterministic trace id: "t_" + first 16 hex of sha1 over the \\x1f-joined parts."""
    return "t_" + hashlib.sha1("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def parse_updated_at(v: Any) -> str | None:
    """ISO 8601 -> "YYYY-MM-DDTHH:MM:SS[.ffffff]Z" in UTC; naive times are taken as UTC; bad -> None."""
    if not isinstance(v, str) or not (10 <= len(v) <= 40):
        return None
    try:
        dt = datetime.fromisoformat(v)
    except ValueError:
        return None
    if len(v) == 20 and v[10] == "T" and v[19] == "Z":
        return v  # already the canonical shape, and valid
    if dt.tzinfo is not None:
        dt = dt.astimezone(timezone.utc).replace(tzinfo=None)
    return dt.isoformat() + "Z"


def reasoning_coef(q: float | None) -> float | None:
    """The validator's reasoning coefficient: 1.0 if q >= 0.8 else 0.3 + 0.875 q."""
    if q is None:
        return None
    return 1.0 if q >= 0.8 else 0.3 + 0.875 * q


def split_think(content: str) -> tuple[str, str]:
    """("think", "rest") from a "<think>…</think>rest" content; ("", content) otherwise."""
    start = content.find("<think>")
    if start < 0 or content[:start].strip():
        return "", content
    end = content.find("</think>", start)
    if end < 0:
        return "", content
    return content[start + 7 : end].strip(), content[end + 8 :].strip()


def _dumps(v: Any) -> str | None:
    """JSON text, or None where orjson refuses (nesting deeper than it writes)."""
    try:
        return orjson.dumps(v).decode()
    except orjson.JSONEncodeError:
        return None


def tools_json(names: set[str] | list[str]) -> str:
    """The `tools` column for these tool names, in TOOL_SCHEMAS order (unknown names left out)."""
    return "[" + ",".join(_TOOL_JSON[n] for n in TOOL_SCHEMAS if n in names) + "]"


def _violation(detail: str) -> Rejection:
    return Rejection.of(Reason.DIALECT_VIOLATION, detail)


def _bad_type(path: str, v: Any) -> Rejection:
    return Rejection.of(Reason.BAD_FIELD_TYPE, f"{path} is {type(v).__name__}")


class _Dialogue:
    """Accumulates canonical messages; hands out tool-call ids unique within the trace."""

    __slots__ = ("messages", "ids", "names", "n_steps", "n_tool_calls")

    def __init__(self, system: str | None, query: str) -> None:
        self.messages: list[dict] = [] if system is None else [{"role": "system", "content": system}]
        self.messages.append({"role": "user", "content": query})
        self.ids: set[str] = set()
        self.names: set[str] = set()
        self.n_steps = 0
        self.n_tool_calls = 0

    def call_id(self, hint: Any, step: int, k: int) -> str:
        """The record's id when usable and unused; a repeat (same call again) gets _2, _3, …"""
        base = hint if isinstance(hint, str) and 0 < len(hint) <= 64 else f"call_{step}_{k}"
        cid, n = base, 1
        while cid in self.ids:
            n += 1
            cid = f"{base}_{n}"
        self.ids.add(cid)
        return cid

    def assistant(self, think: str, content: str, calls: list[dict]) -> None:
        msg: dict[str, Any] = {"role": "assistant", "content": content, "reasoning_content": think}
        if calls:
            msg["tool_calls"] = calls
            self.n_tool_calls += len(calls)
            for c in calls:
                self.names.add(c["function"]["name"])
        self.messages.append(msg)
        self.n_steps += 1

    def tool(self, call_id: str, content: str) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})

    def messages_json(self) -> str | None:
        return _dumps(self.messages)


class _Where:
    """A step's name for rejection details, formatted only when a rejection needs it."""

    __slots__ = ("kind", "i")

    def __init__(self, kind: str, i: int) -> None:
        self.kind, self.i = kind, i

    def __format__(self, spec: str) -> str:
        return f"{self.kind}[{self.i}]"


def _tool_call(item: Any, where: _Where, dialogue: _Dialogue, step: int, k: int) -> dict | Rejection:
    """A ShoppingBench-style {name, parameters, tool_call_id} -> an OpenAI tool call.

    `where` names the step (e.g. "dialogue[2]") for rejection details.
    """
    if not isinstance(item, dict):
        return _violation(f"{where} tool_call[{k}] is {type(item).__name__}, not an object")
    name = item.get("name")
    if not isinstance(name, str) or not name:
        return _violation(f"{where} tool_call[{k}].name is not a non-empty string")
    params = item.get("parameters", {})
    if type(params) is str:
        arguments = params  # kept as given; the format gate decides whether it is a JSON object
    else:
        try:
            arguments = orjson.dumps(params).decode()
        except orjson.JSONEncodeError:
            return _violation(f"{where} tool_call[{k}].parameters cannot be written as JSON")
    hint = item.get("tool_call_id")
    if type(hint) is str and 0 < len(hint) <= 64 and hint not in dialogue.ids:
        cid = hint  # the common case: the record's own id, first use
        dialogue.ids.add(hint)
    else:
        cid = dialogue.call_id(hint, step, k)
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def _fallback_think(completion: dict) -> str:
    """The think when message.think is empty: reasoning_content, else <think> in content."""
    rc = completion.get("reasoning_content")
    if isinstance(rc, str) and rc.strip():
        return rc.replace("<think>", "").replace("</think>", "").strip()
    content = completion.get("content")
    return split_think(content)[0] if isinstance(content, str) else ""


def _step_parts(step: Any, where: _Where) -> tuple[str, str, list] | Rejection:
    """(think, response, tool_call list) of one step, shape-checked."""
    if not isinstance(step, dict):
        return _violation(f"{where} is {type(step).__name__}, not an object")
    completion = step.get("completion")
    if not isinstance(completion, dict):
        return _violation(f"{where}.completion is missing or not an object")
    message = completion.get("message")
    if message is None:
        message = {}
    elif not isinstance(message, dict):
        return _bad_type(f"{where}.completion.message", message)
    think = message.get("think")
    if not think or type(think) is not str:
        if think is not None and not isinstance(think, str):
            return _bad_type(f"{where}.completion.message.think", think)
        think = _fallback_think(completion)
    response = message.get("response") or ""
    if not isinstance(response, str):
        return _bad_type(f"{where}.completion.message.response", response)
    calls = message.get("tool_call") or []
    if not isinstance(calls, list):
        return _bad_type(f"{where}.completion.message.tool_call", calls)
    return think, response, calls


# ---- proxy evidence (primary dialect) ---------------------------------------------------

MAX_PROXY_CALLS_KEPT = 256  # per trace; the rest are only counted
PROXY_CONTENT_HEAD = 120  # characters of a logged completion kept for people to read


_EMITS_TOOL_CALL = re.compile("<tool_call>|" + "|".join(TOOL_SCHEMAS))


def _inference_summary(call: dict, ts: Any) -> dict:
    """What one inference call shows: its limits, its size, whether it emitted a tool call.

    Hot path (about one call a step): plain dict lookups and exact-type tests only.
    """
    out: dict[str, Any] = {"ts": ts if type(ts) is int else None}
    body = call.get("json_data")
    if type(body) is dict:
        mt = body.get("max_tokens") or body.get("max_completion_tokens")
        out["max_tokens"] = mt if type(mt) is int else None
        if body.get("tools"):
            out["tools"] = True
        if body.get("response_format") is not None:
            out["response_format"] = True
    response = call.get("response")
    if type(response) is dict:
        usage = response.get("usage")
        ct = usage.get("completion_tokens") if type(usage) is dict else None
        out["completion_tokens"] = ct if type(ct) is int else None
        choices = response.get("choices")
        msg = choices[0].get("message") if type(choices) is list and choices and type(choices[0]) is dict else None
        if type(msg) is dict:
            content = msg.get("content")
            if type(content) is str:
                out["content"] = content[:PROXY_CONTENT_HEAD]
                out["emits_tool_call"] = "<tool_call>" in content or _EMITS_TOOL_CALL.search(content) is not None
            if msg.get("tool_calls"):
                out["emits_tool_call"] = True
    elif call.get("response_truncated"):
        length = call.get("response_length")
        out["response_length"] = length if type(length) is int else None
    return out


class _ProxyEvidence:
    """Per step: inference call summaries, the paths of /search/* calls, a count of the rest.

    Shape of the `proxy_evidence` column: {"steps": [{"ts", "inference": [{ts, max_tokens,
    completion_tokens, tools?, response_format?, content?, emits_tool_call?,
    response_length?}], "search": [path, …], "other": n}], "dropped": n} where `dropped`
    counts calls beyond MAX_PROXY_CALLS_KEPT or without a string path.
    """

    __slots__ = ("steps", "kept", "dropped")

    def __init__(self) -> None:
        self.steps: list[dict] = []
        self.kept = 0
        self.dropped = 0

    def add_step(self, extra: dict) -> None:
        calls = extra.get("proxy_calls")
        inference: list[dict] = []
        search: list[str] = []
        other = bad = 0
        if type(calls) is list and calls:
            room = MAX_PROXY_CALLS_KEPT - self.kept
            for call in calls if len(calls) <= room else calls[:room]:
                path = call.get("path") if type(call) is dict else None
                if type(path) is not str:
                    bad += 1
                elif path.startswith("/search/"):
                    search.append(path if len(path) <= 128 and "?" not in path else path.split("?", 1)[0][:128])
                elif path.startswith("/inference"):
                    inference.append(_inference_summary(call, call.get("timestamp")))
                else:
                    other += 1
            self.kept += len(calls) - bad if len(calls) <= room else room - bad
            self.dropped += bad + max(0, len(calls) - room)
        ts = extra.get("timestamp")
        self.steps.append({"ts": ts if type(ts) is int else None, "inference": inference, "search": search, "other": other})

    def json(self) -> str:
        return orjson.dumps({"steps": self.steps, "dropped": self.dropped}).decode()


# ---- readers ------------------------------------------------------------------------------


_IDENTITY_KEYS = ("eval_run_id", "problem_id", "miner_hotkey", "validator_hotkey", "agent_version_id")


def _primary_header(obj: dict) -> dict | Rejection:
    """The run-level columns of a primary record, type-checked where the pipeline decides on them."""
    ids = {}
    for key in _IDENTITY_KEYS:
        v = obj.get(key)
        if v is not None and (type(v) is not str or len(v) > MAX_ID_CHARS):
            return Rejection.of(Reason.BAD_FIELD_TYPE, f"{key} is not a string of at most {MAX_ID_CHARS} chars")
        ids[key] = v
    if not ids["eval_run_id"] or not ids["problem_id"]:
        return _violation("eval_run_id and problem_id must be non-empty strings")
    for key in ("status", "phase"):
        if obj.get(key) is not None and not isinstance(obj[key], str):
            return _bad_type(key, obj[key])
    for key in ("score", "reasoning_score"):
        v = obj.get(key)
        if v is not None and (_float(v) is None or not 0.0 <= v <= 1.0):
            return Rejection.of(Reason.BAD_FIELD_TYPE, f"{key} is not a number in [0, 1]")
    problem = obj.get("problem")
    if problem is not None and not isinstance(problem, dict):
        return _bad_type("problem", problem)
    return ids


FAST_PATH = True  # tests turn it off to check both paths give the same rows


def _primary_step_fast(step: Any, convo: _Dialogue) -> bool:
    """The common, well-formed step in one pass, or False (nothing changed) for the careful path.

    Any surprise (a missing key, a wrong type, an id already used, an empty think) sends the
    step to `_primary_step`, which converts it the same way or names what is wrong.
    """
    message = step["completion"]["message"]
    think, response, raw_calls = message["think"], message.get("response") or "", message.get("tool_call") or []
    if type(think) is not str or not think or type(response) is not str or type(raw_calls) is not list:
        return False
    calls, tools, names, ids = [], [], [], set()
    for item in raw_calls:
        name, params, cid = item["name"], item.get("parameters", {}), item["tool_call_id"]
        if type(name) is not str or not name or type(cid) is not str or not 0 < len(cid) <= 64:
            return False
        if cid in ids or cid in convo.ids:
            return False
        ids.add(cid)
        names.append(name)
        arguments = params if type(params) is str else orjson.dumps(params).decode()
        calls.append({"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}})
        if "result" in item:
            tools.append({"role": "tool", "tool_call_id": cid, "content": orjson.dumps(item["result"]).decode()})
    msg: dict[str, Any] = {"role": "assistant", "content": response, "reasoning_content": think}
    if calls:
        msg["tool_calls"] = calls
    convo.messages.append(msg)
    convo.messages.extend(tools)
    convo.ids.update(ids)
    convo.names.update(names)
    convo.n_steps += 1
    convo.n_tool_calls += len(calls)
    return True


def _primary_step(step: Any, i: int, convo: _Dialogue) -> Rejection | None:
    """One step, every field checked: appended to convo, or the rejection that names the fault."""
    where = _Where("dialogue", i)
    parts = _step_parts(step, where)
    if isinstance(parts, Rejection):
        return parts
    think, response, raw_calls = parts
    calls, results = [], []
    for k, item in enumerate(raw_calls):
        call = _tool_call(item, where, convo, i, k)
        if isinstance(call, Rejection):
            return call
        calls.append(call)
        if "result" in item:  # results ride on the call; absent -> no tool turn (unpaired)
            try:
                results.append((call["id"], orjson.dumps(item["result"]).decode()))
            except orjson.JSONEncodeError:
                return _violation(f"{where} tool_call[{k}].result cannot be written as JSON")
    convo.assistant(think, response, calls)
    for cid, text in results:
        convo.tool(cid, text)
    return None


def read_problem_run(obj: Any, *, day: str, source_file: str, source_line: int) -> CanonicalTrace | Rejection:
    """Dialect `sn15.problem_run/v1`: a validator's record of one problem run."""
    if not isinstance(obj, dict):
        return _violation("a problem run must be an object")
    ids = _primary_header(obj)
    if isinstance(ids, Rejection):
        return ids
    problem = _dict(obj.get("problem"))
    dialogue = obj.get("dialogue")
    if dialogue is not None and not isinstance(dialogue, list):
        return _bad_type("dialogue", dialogue)
    if not dialogue:
        return Rejection.of(Reason.EMPTY_DIALOGUE, f"status={_str(obj.get('status'))!s}, no steps")
    query = _str(problem.get("query")) or _str(_dict(_dict(dialogue[0]).get("extra_info")).get("query"))
    if not query or not query.strip():
        return Rejection.of(Reason.MISSING_QUERY, "problem.query and dialogue[0].extra_info.query are empty")
    convo = _Dialogue(SYSTEM_PROMPT, query)
    evidence = _ProxyEvidence()
    for i, step in enumerate(dialogue):
        try:
            done = FAST_PATH and _primary_step_fast(step, convo)
        except (KeyError, TypeError, AttributeError, orjson.JSONEncodeError):
            done = False
        if not done:
            bad = _primary_step(step, i, convo)
            if bad is not None:
                return bad
        extra = step.get("extra_info")
        evidence.add_step(extra if type(extra) is dict else {})
    return _row(
        PRIMARY, convo, ids, obj, problem, query, day, source_file, source_line,
        trace_id=make_trace_id(ids["eval_run_id"], ids["problem_id"]),
        proxy_evidence=evidence.json(),
    )


def _row(
    dialect: str, convo: _Dialogue, ids: dict, obj: dict, problem: dict, query: str,
    day: str, source_file: str, source_line: int, *, trace_id: str, proxy_evidence: str | None,
    tools: str | None = None,
) -> CanonicalTrace | Rejection:
    messages = convo.messages_json()
    if messages is None:
        return _violation("messages cannot be written as JSON (nesting too deep)")
    q = _float(obj.get("reasoning_score"))
    return {
        "trace_id": trace_id,
        "eval_run_id": ids.get("eval_run_id"),
        "problem_id": ids.get("problem_id"),
        "miner_hotkey": ids.get("miner_hotkey"),
        "validator_hotkey": ids.get("validator_hotkey"),
        "agent_version_id": ids.get("agent_version_id"),
        "race_id": _int(obj.get("race_id")),
        "suite_id": _int(obj.get("suite_id")),
        "phase": _str(obj.get("phase")),
        "status": _str(obj.get("status")),
        "category": _str(problem.get("category")),
        "difficulty": _str(problem.get("difficulty")),
        "query": query,
        "score": _float(obj.get("score")),
        "reasoning_score": q,
        "reasoning_coef": reasoning_coef(q),
        "execution_time": _float(obj.get("execution_time")),
        "inference_total": _int(obj.get("inference_total")),
        "inference_failure_count": _int(obj.get("inference_failure_count")),
        "n_steps": convo.n_steps,
        "n_tool_calls": convo.n_tool_calls,
        "updated_at": parse_updated_at(obj.get("updated_at")),
        "dialect": dialect,
        "day": day,
        "source_file": source_file,
        "source_line": source_line,
        "messages": messages,
        "tools": tools if tools is not None else tools_json(convo.names),
        "proxy_evidence": proxy_evidence,
    }


def _content_digest(obj: Any) -> str:
    """Record id for records that carry none: a hash of their content (a re-upload is the same)."""
    try:
        data = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        data = repr(type(obj)).encode() + str(len(obj) if hasattr(obj, "__len__") else 0).encode()
    return hashlib.sha1(data).hexdigest()


def _obs_blocks(prompt: Any) -> tuple[str, int]:
    """(text, number of <obs> blocks) of the last user message of a rollout step's prompt."""
    if not isinstance(prompt, list):
        return "", 0
    for m in reversed(prompt):
        if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str):
            return m["content"], m["content"].count("<obs>")
    return "", 0


def _last_blocks(text: str, n: int) -> list[str]:
    """The last n <obs>…</obs> bodies of text, in order."""
    out, end = [], len(text)
    for _ in range(n):
        close = text.rfind("</obs>", 0, end)
        start = text.rfind("<obs>", 0, close) if close >= 0 else -1
        if start < 0:
            break
        out.append(text[start + 5 : close])
        end = start
    return out[::-1]


def _obs_json(body: str) -> str:
    """An observation as JSON text: parsed when it is JSON, else the raw text as a JSON string."""
    try:
        return orjson.dumps(orjson.loads(body)).decode()
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return orjson.dumps(body.strip()).decode()


def _upstream_obs(body: str) -> dict | None:
    """Upstream's one-block-per-step shape: [{tool_call_id, results}] -> {id: results}."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, list) or not parsed:
        return None
    if not all(isinstance(x, dict) and isinstance(x.get("tool_call_id"), str) for x in parsed):
        return None
    return {x["tool_call_id"]: x.get("results") for x in parsed}


def _rollout_results(calls: list[dict], hints: list[Any], blocks: list[str]) -> dict[str, str]:
    """Pair a step's calls with the observations that appeared in the next prompt.

    Two shapes occur: upstream's single block holding [{tool_call_id, results}] (pair by the
    record's ids), or one block per call in call order (pair by position when counts agree).
    Anything else pairs nothing, and the format gate reports the calls as unpaired.
    """
    if len(blocks) == 1 and (by_id := _upstream_obs(blocks[0])) is not None:
        out = {}
        for call, hint in zip(calls, hints):
            if isinstance(hint, str) and hint in by_id and (text := _dumps(by_id[hint])) is not None:
                out[call["id"]] = text
        return out
    if len(blocks) == len(calls):
        return {call["id"]: _obs_json(body) for call, body in zip(calls, blocks)}
    return {}


def _rollout_system_and_query(steps: list) -> tuple[str | None, str | None]:
    first = steps[0]
    system = None
    prompt = first.get("prompt")
    if isinstance(prompt, list):
        for m in prompt:
            if isinstance(m, dict) and m.get("role") == "system" and isinstance(m.get("content"), str):
                system = m["content"]
                break
    query = _str(_dict(first.get("extra_info")).get("query"))
    if not query:
        text, _ = _obs_blocks(prompt)
        at = text.find("User: ")
        if at >= 0:
            query = text[at + 6 :].split("\n", 1)[0]
    return system, query


def read_rollout(obj: Any, *, day: str, source_file: str, source_line: int) -> CanonicalTrace | Rejection:
    """Dialect `shoppingbench.rollout`: a list of steps; results arrive in the next prompt.

    The last step's results are never recorded, so its calls get no tool turn (the format
    gate accepts that only for a final `terminate`).
    """
    if not isinstance(obj, list) or not obj:
        return _violation("a rollout must be a non-empty list of steps")
    for i, step in enumerate(obj):
        if not isinstance(step, dict):
            return _violation(f"step[{i}] is {type(step).__name__}, not an object")
    system, query = _rollout_system_and_query(obj)
    if not query or not query.strip():
        return Rejection.of(Reason.MISSING_QUERY, "no extra_info.query and no 'User:' line in the first prompt")
    convo = _Dialogue(system if system is not None else SYSTEM_PROMPT, query)
    seen_blocks = _obs_blocks(obj[0].get("prompt"))[1]
    for i, step in enumerate(obj):
        where = _Where("step", i)
        parts = _step_parts(step, where)
        if isinstance(parts, Rejection):
            return parts
        think, response, raw_calls = parts
        calls = []
        for k, item in enumerate(raw_calls):
            call = _tool_call(item, where, convo, i, k)
            if isinstance(call, Rejection):
                return call
            calls.append(call)
        convo.assistant(think, response, calls)
        if i + 1 == len(obj):
            break
        text, count = _obs_blocks(obj[i + 1].get("prompt"))
        if calls:  # the observations new in the next prompt answer this step's calls
            hints = [item.get("tool_call_id") for item in raw_calls]
            results = _rollout_results(calls, hints, _last_blocks(text, max(0, count - seen_blocks)))
            for c in calls:
                if c["id"] in results:
                    convo.tool(c["id"], results[c["id"]])
        seen_blocks = count
    return _row(
        ROLLOUT, convo, {}, {}, {}, query, day, source_file, source_line,
        trace_id=make_trace_id(ROLLOUT, _content_digest(obj)), proxy_evidence=None,
    )


def _text_content(v: Any) -> str | None:
    """Message content as text: a string, null (""), or OpenAI text parts joined; else None."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in v):
        return "".join(p["text"] for p in v)
    return None


def _openai_tool_calls(raw: Any, where: str, convo: _Dialogue) -> list[dict] | Rejection:
    if raw is None:
        return []
    if not isinstance(raw, list):
        return _bad_type(f"{where}.tool_calls", raw)
    calls = []
    for k, tc in enumerate(raw):
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            return _violation(f"{where}.tool_calls[{k}] has no function name")
        args = fn.get("arguments", "{}")
        args = args if isinstance(args, str) else _dumps(args)
        cid = tc.get("id")
        if not isinstance(cid, str) or not cid or args is None:
            return _violation(f"{where}.tool_calls[{k}] lacks a string id or JSON arguments")
        convo.ids.add(cid)  # kept as given: duplicates are the format gate's to report
        calls.append({"id": cid, "type": "function", "function": {"name": fn["name"], "arguments": args}})
    return calls


def _openai_message(m: Any, i: int, convo: _Dialogue) -> Rejection | None:
    """Append one validated message of an openai.messages record to convo."""
    where = f"messages[{i}]"
    if not isinstance(m, dict):
        return _violation(f"{where} is {type(m).__name__}, not an object")
    role, content = m.get("role"), _text_content(m.get("content"))
    if content is None:
        return _bad_type(f"{where}.content", m.get("content"))
    if role in ("system", "user"):
        convo.messages.append({"role": role, "content": content})
    elif role == "assistant":
        think = m.get("reasoning_content")
        if think is not None and not isinstance(think, str):
            return _bad_type(f"{where}.reasoning_content", think)
        if not think:
            think, rest = split_think(content)
            content = rest if think else content
        calls = _openai_tool_calls(m.get("tool_calls"), where, convo)
        if isinstance(calls, Rejection):
            return calls
        convo.assistant(think, content, calls)
    elif role == "tool":
        cid = m.get("tool_call_id")
        if not isinstance(cid, str):
            return _violation(f"{where} (tool) has no string tool_call_id")
        convo.tool(cid, content)
    else:
        return _violation(f"{where}.role {str(role)[:40]!r} is not system/user/assistant/tool")
    return None


def _openai_tools(raw: Any, names: set[str]) -> str | Rejection:
    """The record's own tool list when well formed; otherwise our schemas for the tools used."""
    if raw is None:
        return tools_json(names)
    ok = isinstance(raw, list) and all(
        isinstance(t, dict) and isinstance(_dict(t.get("function")).get("name"), str) for t in raw
    )
    if not ok:
        return _violation("tools is not a list of {type, function: {name, …}} objects")
    text = _dumps(raw)
    return text if text is not None else _violation("tools cannot be written as JSON")


def read_openai_messages(obj: Any, *, day: str, source_file: str, source_line: int) -> CanonicalTrace | Rejection:
    """Dialect `openai.messages`: already canonical; validated, stripped to known keys, passed on."""
    if not isinstance(obj, dict):
        return _violation("an openai.messages record must be an object")
    raw = obj.get("messages")
    if not isinstance(raw, list) or not raw:
        return _violation("messages must be a non-empty list")
    first_user = next((m for m in raw if isinstance(m, dict) and m.get("role") == "user"), None)
    query = _text_content(first_user.get("content")) if first_user else None
    if not query or not query.strip():
        return Rejection.of(Reason.MISSING_QUERY, "no user message with text")
    convo = _Dialogue(None, query)
    convo.messages.clear()  # the record's own messages, system prompt included, in order
    for i, m in enumerate(raw):
        bad = _openai_message(m, i, convo)
        if bad is not None:
            return bad
    tools = _openai_tools(obj.get("tools"), convo.names)
    if isinstance(tools, Rejection):
        return tools
    rid = obj.get("id")
    rid = str(rid) if isinstance(rid, (str, int)) and not isinstance(rid, bool) and str(rid) else _content_digest(obj)
    return _row(
        OPENAI, convo, {}, {}, {}, query, day, source_file, source_line,
        trace_id=make_trace_id(OPENAI, rid), proxy_evidence=None, tools=tools,
    )


# ---- registry -------------------------------------------------------------------------


Reader = Callable[..., "CanonicalTrace | Rejection"]


@dataclass(frozen=True)
class Dialect:
    """A named dialect: a cheap shape test and the reader behind it."""

    name: str
    detect: Callable[[Any], bool]
    read: Reader


def _is_primary(obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    schema = obj.get("schema")
    return schema == PRIMARY or (schema is None and "eval_run_id" in obj and "dialogue" in obj)


def _is_rollout(obj: Any) -> bool:
    return isinstance(obj, list) and bool(obj) and isinstance(obj[0], dict) and "completion" in obj[0]


def _is_openai(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("schema") is None and "messages" in obj


DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (
        Dialect(PRIMARY, _is_primary, read_problem_run),
        Dialect(ROLLOUT, _is_rollout, read_rollout),
        Dialect(OPENAI, _is_openai, read_openai_messages),
    )
}


def detect_dialect(obj: Any) -> str | None:
    """The name of the first dialect whose shape test accepts obj; None when none does."""
    for d in DIALECTS.values():
        if d.detect(obj):
            return d.name
    return None


def record_identity(obj: Any) -> dict[str, str | None]:
    """Best-effort ids of a record, even a rejected one, for its ledger row."""
    out: dict[str, str | None] = {"trace_id": None, "eval_run_id": None, "problem_id": None, "miner_hotkey": None}
    if isinstance(obj, dict):
        for key in ("eval_run_id", "problem_id", "miner_hotkey"):
            v = obj.get(key)
            out[key] = v if isinstance(v, str) and len(v) <= MAX_ID_CHARS else None
        if out["eval_run_id"] and out["problem_id"]:
            out["trace_id"] = make_trace_id(out["eval_run_id"], out["problem_id"])
    return out
