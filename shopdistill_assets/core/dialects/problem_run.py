"""Dialect `sn15.problem_run/v1`: a validator's record of one problem run (the primary dialect).

Each step's tool calls carry their results, so a call and its tool turn come from the same
place. `_primary_step` checks every field of a step and names the fault.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..reasons import Reason, Rejection
from .common import (
    MAX_ID_CHARS,
    MAX_STEPS,
    MAX_TOOL_CALLS,
    PRIMARY,
    SYSTEM_PROMPT,
    CanonicalTrace,
    _bad_type,
    _dict,
    _float,
    _over_limit,
    _query_over_limit,
    _str,
    _violation,
    failed_run,
    make_trace_id,
)
from .dialogue import _Dialogue, _row, _step_parts, _tool_call, _Where
from .proxy_evidence import _ProxyEvidence

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


def _primary_step(step: Any, i: int, convo: _Dialogue) -> Rejection | None:
    """One step, every field checked: appended to convo, or the rejection that names the fault."""
    where = _Where("dialogue", i)
    parts = _step_parts(step, where)
    if isinstance(parts, Rejection):
        return parts
    think, response, raw_calls = parts
    if convo.n_tool_calls + len(raw_calls) > MAX_TOOL_CALLS:
        return _over_limit("tool calls", convo.n_tool_calls + len(raw_calls), MAX_TOOL_CALLS)
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


def read_problem_run(obj: Any, *, day: str, source_file: str, source_line: int,
                     parsed: dict | None = None) -> CanonicalTrace | Rejection:
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
    if failed := failed_run(obj.get("status"), dialogue):
        return failed
    if not dialogue:
        return Rejection.of(Reason.EMPTY_DIALOGUE, f"status={_str(obj.get('status'))!s}, no steps")
    query = _str(problem.get("query")) or _str(_dict(_dict(dialogue[0]).get("extra_info")).get("query"))
    steps = read_query_and_steps(dialogue, query, "problem.query and dialogue[0].extra_info.query")
    if isinstance(steps, Rejection):
        return steps
    convo, evidence = steps
    return _row(
        PRIMARY, convo, ids, obj, problem, query, day, source_file, source_line,
        trace_id=make_trace_id(ids["eval_run_id"], ids["problem_id"]),
        proxy_evidence=evidence.as_object(), parsed=parsed,
    )


def read_query_and_steps(dialogue: list, query: str | None, where: str) -> tuple[_Dialogue, _ProxyEvidence] | Rejection:
    """The checks every ORO shape makes before its steps (step count, then the query found at
    `where`), then read_steps."""
    if len(dialogue) > MAX_STEPS:
        return _over_limit("steps", len(dialogue), MAX_STEPS)
    if not query or not query.strip():
        return Rejection.of(Reason.MISSING_QUERY, f"{where} {'are' if ' and ' in where else 'is'} empty")
    if too_long := _query_over_limit(query):
        return too_long
    return read_steps(dialogue, query)


def read_steps(dialogue: list, query: str) -> tuple[_Dialogue, _ProxyEvidence] | Rejection:
    """ORO's steps (results riding on each call, proxy calls in extra_info) -> the dialogue and
    its proxy evidence. Shared by every ORO shape: the joined record, the sandbox envelope and
    the bare upload carry the same steps."""
    convo = _Dialogue(SYSTEM_PROMPT, query)
    evidence = _ProxyEvidence()
    for i, step in enumerate(dialogue):
        bad = _primary_step(step, i, convo)
        if bad is not None:
            return bad
        extra = step.get("extra_info")
        evidence.add_step(extra if type(extra) is dict else {})
    return convo, evidence
