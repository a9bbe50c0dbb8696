"""The evaluated model's tool calls: read defensively, run in the sandbox off the event loop.

The model's output is hostile input: names that are not strings, arguments nested 100,000 deep
or holding 4,000-digit integers, calls that are not objects. Each becomes either a tool error
message the model sees, or the end of the episode with a failure reason (`unknown_tool`,
`bad_tool_json`); nothing raises out of here for a bad call.

Tools run in a thread pool, each call awaited under a deadline (the tool timeout, cut by the
episode deadline), so a slow tool holds neither the event loop nor its episode past the deadline
(the thread is left to finish on its own; the sandbox bounds its work). `python_execute`, the
one tool that evaluates model input, runs in worker processes that are killed at the deadline.
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from shopdistill_assets.sandbox.tools import Sandbox, ToolResult

_MAX_NAME_CHARS = 200


class EpisodeDeadline(Exception):
    """The episode's time ran out while it waited on a tool."""


class HarnessError(Exception):
    """Our side failed (not the model): the episode ends as `internal_error`."""


def tool_name(raw: Any) -> str | None:
    """The tool name if it is a usable string; anything else names no tool."""
    return raw if isinstance(raw, str) and len(raw) <= _MAX_NAME_CHARS else None


def arguments_text(args: Any) -> str:
    """Arguments as the JSON text the canonical trace stores (never raises)."""
    if isinstance(args, str):
        return args
    try:
        return json.dumps(args)
    except (TypeError, ValueError, RecursionError):
        return json.dumps(str(type(args).__name__))


def assistant_turn(message: dict[str, Any], step: int) -> tuple[dict[str, Any], list[tuple[str, Any, Any]]]:
    """Canonical assistant message + (call id, raw name, raw arguments) per tool call."""
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    turn: dict[str, Any] = {"role": "assistant", "content": content}
    if isinstance(reasoning, str) and reasoning:
        turn["reasoning_content"] = reasoning
    calls, seen_ids = [], set()
    raw_calls = message.get("tool_calls") if isinstance(message.get("tool_calls"), list) else []
    for i, call in enumerate(raw_calls):
        call = call if isinstance(call, dict) else {}
        fn = call.get("function") if isinstance(call.get("function"), dict) else {}
        call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else f"call_{step}_{i}"
        if call_id in seen_ids:  # ids must pair calls with results one to one
            call_id = f"{call_id}_{i}"
        seen_ids.add(call_id)
        name, args = fn.get("name"), fn.get("arguments")
        shown = tool_name(name) or ("" if name is None else f"<{type(name).__name__}>")
        calls.append((call_id, name, args))
        turn.setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function", "function": {"name": shown, "arguments": arguments_text(args)}})
    return turn, calls


def parse_arguments(args: Any) -> dict[str, Any] | None:
    """The arguments object, or None when they are not a JSON object (cut off, too deep, …)."""
    if args is None or (isinstance(args, str) and not args.strip()):
        return {}
    if isinstance(args, dict):
        return args
    try:
        parsed = json.loads(args) if isinstance(args, str) else None
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


class ToolRunner:
    """Sandbox calls in a thread pool, each awaited under min(tool timeout, episode deadline)."""

    def __init__(self, sandbox: Sandbox, timeout_s: float, workers: int) -> None:
        self.sandbox = sandbox
        self.timeout_s = timeout_s
        self.pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="sandbox")

    async def call(self, name: str, args: dict[str, Any], deadline: float) -> ToolResult:
        budget = min(self.timeout_s, deadline - time.monotonic())
        if budget <= 0:
            raise EpisodeDeadline
        future = self.pool.submit(self.sandbox.call, name, args)
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(future), budget)
        except TimeoutError:
            future.cancel()
            if time.monotonic() >= deadline - 1e-3:
                raise EpisodeDeadline from None
            return ToolResult(False, error=f"{name} timed out after {budget:g} s")
        except Exception as exc:  # Sandbox.call answers bad input itself: this is our bug
            raise HarnessError(f"sandbox {name}: {type(exc).__name__}: {str(exc)[:200]}") from None
        if not isinstance(result, ToolResult):
            raise HarnessError(f"sandbox {name} returned {type(result).__name__}")
        return result

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


@dataclass
class Trajectory:
    messages: list[dict[str, Any]]
    calls: list[tuple[str, Any]] = field(default_factory=list)
    end_reason: str = ""
    format_valid: bool = True


async def act(traj: Trajectory, message: dict[str, Any], step: int, tools: ToolRunner, tool_names: set[str],
              deadline: float) -> None:
    """Append the assistant turn, run its tool calls, set `end_reason` if the episode ends."""
    turn, calls = assistant_turn(message, step)
    traj.messages.append(turn)
    if not calls:
        recommended = any(name == "recommend_product" for name, _ in traj.calls)
        if "<tool_call>" in turn["content"]:  # the server could not parse the model's tool call
            traj.end_reason, traj.format_valid = "bad_tool_json", False
        elif recommended and turn["content"].strip():
            traj.end_reason = "stop"  # a closing answer after the recommendation
        else:
            traj.end_reason, traj.format_valid = "no_tool_call", False
        return
    for call_id, raw_name, raw_args in calls:
        name = tool_name(raw_name)
        if name is None or name not in tool_names:
            traj.end_reason, traj.format_valid = "unknown_tool", False
            return
        args = parse_arguments(raw_args)
        if args is None:
            traj.end_reason, traj.format_valid = "bad_tool_json", False
            return
        result = await tools.call(name, args, deadline)
        traj.calls.append((name, args))
        traj.messages.append({"role": "tool", "tool_call_id": call_id, "content": _result_text(result)})
        if name == "terminate":
            traj.end_reason = "terminate"
            return


def _result_text(result: ToolResult) -> str:
    try:
        return json.dumps(result.content(), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise HarnessError(f"tool result not JSON: {type(exc).__name__}") from None
