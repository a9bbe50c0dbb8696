"""OpenAI messages as Arrow structs: what a training snapshot stores instead of JSON text.

Canonical rows keep `messages` as JSON text (the lake's contract); the train corpus and the stage
datasets store them as MESSAGES_TYPE, a list of structs `datasets` hands to TRL as it is.
Tool-call `arguments` stay JSON text.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

TOOL_CALL_TYPE = pa.struct([
    ("id", pa.string()), ("type", pa.string()),
    ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())])),
])
MESSAGE_TYPE = pa.struct([
    ("role", pa.string()), ("content", pa.string()), ("reasoning_content", pa.string()),
    ("tool_calls", pa.list_(TOOL_CALL_TYPE)), ("tool_call_id", pa.string()),
])
MESSAGES_TYPE = pa.list_(MESSAGE_TYPE)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def structured_message(message: dict[str, Any]) -> dict[str, Any]:
    """One OpenAI message as MESSAGE_TYPE: fixed keys, text fields, arguments as JSON text."""
    calls = None
    if isinstance(message.get("tool_calls"), list) and message["tool_calls"]:
        calls = []
        for call in message["tool_calls"]:
            fn = call.get("function") if isinstance(call, dict) and isinstance(call.get("function"), dict) else {}
            args = fn.get("arguments")
            calls.append({"id": _text(call.get("id")) if isinstance(call, dict) else None, "type": "function",
                          "function": {"name": _text(fn.get("name")) or "",
                                       "arguments": args if isinstance(args, str) else json.dumps(args)}})
    return {"role": _text(message.get("role")) or "", "content": _text(message.get("content")) or "",
            "reasoning_content": _text(message.get("reasoning_content")), "tool_calls": calls,
            "tool_call_id": _text(message.get("tool_call_id"))}


def structured_messages(messages: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Canonical JSON text (or an already structured list) -> MESSAGE_TYPE dicts."""
    items = json.loads(messages) if isinstance(messages, str) else messages
    return [structured_message(m) for m in items if isinstance(m, dict)]


def with_structured_messages(table: pa.Table) -> pa.Table:
    """A canonical table whose `messages` JSON text column becomes MESSAGES_TYPE."""
    index = table.schema.get_field_index("messages")
    column = pa.array([structured_messages(text) for text in table.column("messages").to_pylist()], MESSAGES_TYPE)
    return table.set_column(index, pa.field("messages", MESSAGES_TYPE), column)
