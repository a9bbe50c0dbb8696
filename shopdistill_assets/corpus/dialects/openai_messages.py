"""Dialect `openai.messages`: already canonical; validated, stripped to known keys, passed on."""

from __future__ import annotations

from typing import Any

from shopdistill_assets.corpus.dialects.common import (
    MAX_MESSAGES,
    MAX_TOOL_CALLS,
    OPENAI,
    CanonicalTrace,
    _bad_type,
    _content_digest,
    _dict,
    _dumps,
    _over_limit,
    _query_over_limit,
    _violation,
    make_trace_id,
    split_think,
    tools_json,
)
from shopdistill_assets.corpus.dialects.dialogue import _Dialogue, _row
from shopdistill_assets.corpus.reasons import Reason, Rejection


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
    if convo.n_tool_calls + len(raw) > MAX_TOOL_CALLS:
        return _over_limit("tool calls", convo.n_tool_calls + len(raw), MAX_TOOL_CALLS)
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


def read_openai_messages(obj: Any, *, day: str, source_file: str, source_line: int,
                         parsed: dict | None = None) -> CanonicalTrace | Rejection:
    """Dialect `openai.messages`: already canonical; validated, stripped to known keys, passed on."""
    if not isinstance(obj, dict):
        return _violation("an openai.messages record must be an object")
    raw = obj.get("messages")
    if not isinstance(raw, list) or not raw:
        return _violation("messages must be a non-empty list")
    if len(raw) > MAX_MESSAGES:
        return _over_limit("messages", len(raw), MAX_MESSAGES)
    first_user = next((m for m in raw if isinstance(m, dict) and m.get("role") == "user"), None)
    query = _text_content(first_user.get("content")) if first_user else None
    if not query or not query.strip():
        return Rejection.of(Reason.MISSING_QUERY, "no user message with text")
    if too_long := _query_over_limit(query):
        return too_long
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
        trace_id=make_trace_id(OPENAI, rid), proxy_evidence=None, tools=tools, parsed=parsed,
    )
