"""Dialect `sn15.problem_run/v1`: a validator's record of one problem run (the primary dialect).

Each step's tool calls carry their results, so a call and its tool turn come from the same
place. The record's types (identity, status, scores, every step's fields) are checked by its
typed decode (shapes.py); what is left here is what types cannot say: non-empty ids, the
run's outcome, the query, and the per-record limits.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson
from msgspec import UNSET

from shopdistill_assets.corpus.dialects.common import (
    MAX_STEPS,
    MAX_TOOL_CALLS,
    PRIMARY,
    SYSTEM_PROMPT,
    CanonicalTrace,
    _over_limit,
    _query_over_limit,
    _str,
    _violation,
    failed_run,
    make_trace_id,
)
from shopdistill_assets.corpus.dialects.dialogue import _Dialogue, _row, _step_parts, _tool_call, _Where
from shopdistill_assets.corpus.dialects.proxy_evidence import _ProxyEvidence
from shopdistill_assets.corpus.dialects.shapes import (
    EMPTY_EXTRA,
    EMPTY_PROBLEM,
    ExtraInfo,
    ProblemRun,
    Step,
    shape_rejection,
    typed,
)
from shopdistill_assets.corpus.reasons import Reason, Rejection

_IDENTITY_KEYS = ("eval_run_id", "problem_id", "miner_hotkey", "validator_hotkey", "agent_version_id")


def as_problem_run(obj: Any) -> ProblemRun | Rejection:
    """The typed record: as decoded from the line, or a generically decoded object checked
    against the same types (a hostile primary record, or a caller's dict)."""
    if isinstance(obj, ProblemRun):
        return obj
    if not isinstance(obj, dict):
        return _violation("a problem run must be an object")
    try:
        return typed(obj, ProblemRun)
    except msgspec.ValidationError as err:
        return shape_rejection(err)


def _primary_step(step: Step, i: int, convo: _Dialogue) -> Rejection | None:
    """One step (its types already checked): appended to convo, or the rejection that names the fault."""
    think, response, raw_calls = _step_parts(step)
    if convo.n_tool_calls + len(raw_calls) > MAX_TOOL_CALLS:
        return _over_limit("tool calls", convo.n_tool_calls + len(raw_calls), MAX_TOOL_CALLS)
    calls, results = [], []
    where = _Where("dialogue", i)
    for k, item in enumerate(raw_calls):
        call = _tool_call(item, where, convo, i, k)
        if type(call) is not dict:
            return call
        calls.append(call)
        if item.result is not UNSET:  # results ride on the call; absent -> no tool turn (unpaired)
            try:
                results.append((call["id"], orjson.dumps(item.result).decode()))
            except orjson.JSONEncodeError:
                return _violation(f"dialogue[{i}] tool_call[{k}].result cannot be written as JSON")
    convo.assistant(think, response, calls)
    for cid, text in results:
        convo.tool(cid, text)
    return None


def read_problem_run(obj: Any, *, day: str, source_file: str, source_line: int,
                     parsed: dict | None = None) -> CanonicalTrace | Rejection:
    """Dialect `sn15.problem_run/v1`: a validator's record of one problem run."""
    run = as_problem_run(obj)
    if isinstance(run, Rejection):
        return run
    ids = {key: getattr(run, key) for key in _IDENTITY_KEYS}
    if not ids["eval_run_id"] or not ids["problem_id"]:
        return _violation("eval_run_id and problem_id must be non-empty strings")
    problem = run.problem or EMPTY_PROBLEM
    dialogue = run.dialogue or None
    if failed := failed_run(run.status, dialogue):
        return failed
    if not dialogue:
        return Rejection.of(Reason.EMPTY_DIALOGUE, f"status={run.status!s}, no steps")
    first = dialogue[0].extra_info
    query = _str(problem.query) or (_str(first.query) if type(first) is ExtraInfo else None)
    steps = read_query_and_steps(dialogue, query, "problem.query and dialogue[0].extra_info.query")
    if isinstance(steps, Rejection):
        return steps
    convo, evidence = steps
    header = {"race_id": run.race_id, "suite_id": run.suite_id, "phase": run.phase, "status": run.status,
              "score": run.score, "reasoning_score": run.reasoning_score, "execution_time": run.execution_time,
              "inference_total": run.inference_total, "inference_failure_count": run.inference_failure_count,
              "updated_at": run.updated_at}
    return _row(
        PRIMARY, convo, ids, header, {"category": problem.category, "difficulty": problem.difficulty}, query,
        day, source_file, source_line, trace_id=make_trace_id(ids["eval_run_id"], ids["problem_id"]),
        proxy_evidence=evidence.as_object(), parsed=parsed,
    )


def read_query_and_steps(dialogue: list[Step], query: str | None,
                         where: str) -> tuple[_Dialogue, _ProxyEvidence] | Rejection:
    """The checks every ORO shape makes before its steps (step count, then the query found at
    `where`), then read_steps."""
    if len(dialogue) > MAX_STEPS:
        return _over_limit("steps", len(dialogue), MAX_STEPS)
    if not query or not query.strip():
        return Rejection.of(Reason.MISSING_QUERY, f"{where} {'are' if ' and ' in where else 'is'} empty")
    if too_long := _query_over_limit(query):
        return too_long
    return read_steps(dialogue, query)


def read_steps(dialogue: list[Step], query: str) -> tuple[_Dialogue, _ProxyEvidence] | Rejection:
    """ORO's steps (results riding on each call, proxy calls in extra_info) -> the dialogue and
    its proxy evidence. Shared by every ORO shape: the joined record, the sandbox envelope and
    the bare upload carry the same steps."""
    convo = _Dialogue(SYSTEM_PROMPT, query)
    evidence = _ProxyEvidence()
    for i, step in enumerate(dialogue):
        bad = _primary_step(step, i, convo)
        if bad is not None:
            return bad
        extra = step.extra_info
        evidence.add_step(extra if type(extra) is ExtraInfo else EMPTY_EXTRA)
    return convo, evidence
