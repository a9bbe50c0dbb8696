"""Building a canonical trace: the OpenAI tool-calls messages, one step at a time, and the row.

Shared by the readers: `_Dialogue` accumulates messages and hands out call ids; `_step_parts`
and `_tool_call` read a ShoppingBench-style step, typed (shapes.py: primary, ORO and rollout);
`_row` turns a finished dialogue and a record's fields into a `CanonicalTrace`.
"""

from __future__ import annotations

from typing import Any

import orjson

from shopdistill_assets.corpus.dialects.common import (
    CanonicalTrace,
    _dumps,
    _float,
    _int,
    _str,
    _violation,
    parse_updated_at,
    reasoning_coef,
    split_think,
    tools_json,
)
from shopdistill_assets.corpus.dialects.shapes import Completion, Step, ToolCall, raw_text
from shopdistill_assets.corpus.reasons import Rejection


class _Dialogue:
    """Accumulates canonical messages; hands out tool-call ids unique within the trace."""

    __slots__ = ("messages", "ids", "names", "n_steps", "n_tool_calls", "_next_suffix")

    def __init__(self, system: str | None, query: str) -> None:
        self.messages: list[dict] = [] if system is None else [{"role": "system", "content": system}]
        self.messages.append({"role": "user", "content": query})
        self.ids: set[str] = set()
        self.names: set[str] = set()
        self.n_steps = 0
        self.n_tool_calls = 0
        self._next_suffix: dict[str, int] = {}  # base id -> the suffix to try next

    def call_id(self, hint: Any, step: int, k: int) -> str:
        """The record's id when usable and unused; a repeat (same call again) gets _2, _3, …

        The first free suffix is remembered per base (ids are only ever added, so a suffix
        found taken stays taken): k repeats of one id cost O(k), not O(k²).
        """
        base = hint if isinstance(hint, str) and 0 < len(hint) <= 64 else f"call_{step}_{k}"
        cid = base
        if cid in self.ids:
            n = self._next_suffix.get(base, 2)
            cid = f"{base}_{n}"
            while cid in self.ids:
                n += 1
                cid = f"{base}_{n}"
            self._next_suffix[base] = n + 1
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


def _tool_call(item: ToolCall, where: _Where, dialogue: _Dialogue, step: int, k: int) -> dict | Rejection:
    """An ORO call {name, parameters, tool_call_id} (types checked by its decode) -> an OpenAI
    tool call. `where` names the step (e.g. "dialogue[2]") for rejection details."""
    params = item.parameters
    if type(params) is str:
        arguments = params  # kept as given; the format gate decides whether it is a JSON object
    else:
        try:
            arguments = orjson.dumps(params).decode()
        except orjson.JSONEncodeError:
            return _violation(f"{where} tool_call[{k}].parameters cannot be written as JSON")
    hint = item.tool_call_id
    if type(hint) is str and 0 < len(hint) <= 64 and hint not in dialogue.ids:
        cid = hint  # the common case: the record's own id, first use
        dialogue.ids.add(hint)
    else:
        cid = dialogue.call_id(hint, step, k)
    return {"id": cid, "type": "function", "function": {"name": item.name, "arguments": arguments}}


def _fallback_think(completion: Completion) -> str:
    """The think when message.think is empty: reasoning_content, else <think> in content."""
    rc = raw_text(completion.reasoning_content)
    if rc is not None and rc.strip():
        return rc.replace("<think>", "").replace("</think>", "").strip()
    content = raw_text(completion.content)
    return split_think(content)[0] if content is not None else ""


def _step_parts(step: Step) -> tuple[str, str, list[ToolCall]]:
    """(think, response, tool calls) of one step."""
    completion = step.completion
    message = completion.message
    if message is None:
        return _fallback_think(completion), "", []
    return message.think or _fallback_think(completion), message.response or "", message.tool_call or []


def _row(
    dialect: str, convo: _Dialogue, ids: dict, obj: dict, problem: dict, query: str,
    day: str, source_file: str, source_line: int, *, trace_id: str, proxy_evidence: Any = None,
    tools: str | None = None, parsed: dict | None = None,
) -> CanonicalTrace | Rejection:
    """The canonical row. `proxy_evidence`: the evidence object (written as JSON here);
    `parsed`, when given, receives `messages` and `evidence` as objects (see normalize_record)."""
    messages = convo.messages_json()
    if messages is None:
        return _violation("messages cannot be written as JSON (nesting too deep)")
    if parsed is not None:
        parsed["messages"] = convo.messages
        parsed["evidence"] = proxy_evidence
    evidence_json = None if proxy_evidence is None else _dumps(proxy_evidence)
    if proxy_evidence is not None and evidence_json is None:
        return _violation("proxy evidence cannot be written as JSON")
    get, ids_get = obj.get, ids.get  # bound once: twenty lookups a trace
    q = _float(get("reasoning_score"))
    return {
        "trace_id": trace_id,
        "eval_run_id": ids_get("eval_run_id"),
        "problem_id": ids_get("problem_id"),
        "miner_hotkey": ids_get("miner_hotkey"),
        "validator_hotkey": ids_get("validator_hotkey"),
        "agent_version_id": ids_get("agent_version_id"),
        "race_id": _int(get("race_id")),
        "suite_id": _int(get("suite_id")),
        "phase": _str(get("phase")),
        "status": _str(get("status")),
        "category": _str(problem.get("category")),
        "difficulty": _str(problem.get("difficulty")),
        "query": query,
        "score": _float(get("score")),
        "reasoning_score": q,
        "reasoning_coef": None if q is None else reasoning_coef(q),
        "execution_time": _float(get("execution_time")),
        "inference_total": _int(get("inference_total")),
        "inference_failure_count": _int(get("inference_failure_count")),
        "n_steps": convo.n_steps,
        "n_tool_calls": convo.n_tool_calls,
        "updated_at": parse_updated_at(get("updated_at")),
        "dialect": dialect,
        "day": day,
        "source_file": source_file,
        "source_line": source_line,
        "messages": messages,
        "tools": tools if tools is not None else tools_json(convo.names),
        "proxy_evidence": evidence_json,
    }
