"""Dialect `shoppingbench.rollout`: upstream's list of steps, results arriving in the next prompt."""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from shopdistill_assets.corpus.dialects.common import (
    MAX_STEPS,
    MAX_TOOL_CALLS,
    ROLLOUT,
    SYSTEM_PROMPT,
    CanonicalTrace,
    _content_digest,
    _dict,
    _dumps,
    _over_limit,
    _query_over_limit,
    _str,
    _violation,
    make_trace_id,
)
from shopdistill_assets.corpus.dialects.dialogue import _Dialogue, _row, _step_parts, _tool_call, _Where
from shopdistill_assets.corpus.dialects.shapes import STEPS, shape_rejection, typed
from shopdistill_assets.corpus.reasons import Reason, Rejection


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


def read_rollout(obj: Any, *, day: str, source_file: str, source_line: int,
                 parsed: dict | None = None) -> CanonicalTrace | Rejection:
    """Dialect `shoppingbench.rollout`: a list of steps; results arrive in the next prompt.

    The last step's results are never recorded, so its calls get no tool turn (the format
    gate accepts that only for a final `terminate`).
    """
    if not isinstance(obj, list) or not obj:
        return _violation("a rollout must be a non-empty list of steps")
    if len(obj) > MAX_STEPS:
        return _over_limit("steps", len(obj), MAX_STEPS)
    for i, step in enumerate(obj):
        if not isinstance(step, dict):
            return _violation(f"step[{i}] is {type(step).__name__}, not an object")
    system, query = _rollout_system_and_query(obj)
    if not query or not query.strip():
        return Rejection.of(Reason.MISSING_QUERY, "no extra_info.query and no 'User:' line in the first prompt")
    if too_long := _query_over_limit(query):
        return too_long
    convo = _Dialogue(system if system is not None else SYSTEM_PROMPT, query)
    seen_blocks = _obs_blocks(obj[0].get("prompt"))[1]
    try:
        typed_steps = typed(obj, STEPS)
    except msgspec.ValidationError as err:
        return shape_rejection(err, "step")
    for i, typed_step in enumerate(typed_steps):
        where = _Where("step", i)
        think, response, raw_calls = _step_parts(typed_step)
        if convo.n_tool_calls + len(raw_calls) > MAX_TOOL_CALLS:
            return _over_limit("tool calls", convo.n_tool_calls + len(raw_calls), MAX_TOOL_CALLS)
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
            hints = [item.tool_call_id for item in raw_calls]
            results = _rollout_results(calls, hints, _last_blocks(text, max(0, count - seen_blocks)))
            for c in calls:
                if c["id"] in results:
                    convo.tool(c["id"], results[c["id"]])
        seen_blocks = count
    return _row(
        ROLLOUT, convo, {}, {}, {}, query, day, source_file, source_line,
        trace_id=make_trace_id(ROLLOUT, _content_digest(obj)), proxy_evidence=None, parsed=parsed,
    )
