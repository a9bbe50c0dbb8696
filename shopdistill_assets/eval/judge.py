"""An LLM judge of an episode's reasoning, with the validator's gate tree as rubric (optional).

The validator scores reasoning through a fixed gate tree; we ask an OpenAI-compatible model to
walk the same gates over a compact transcript and to end with `SCORE: <value>`. Anything that
does not yield a number in [0, 1] (garbage, refusals, an endpoint failure) gives None, which
the metrics treat as "not judged", never as zero.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from typing import Any

RUBRIC = """You grade the reasoning of a shopping agent that used tools to find products. Walk these \
gates in order and stop at the first one that fails:
1. No inference call produced at least 30 completion tokens -> 0.1
2. The reasoning never refers to the tool results -> 0.3
3. The reasoning cites no specific datum (a product id, price, brand, attribute or shop) -> 0.5
4. The reasoning never compares at least two candidates with a reason -> 0.7
5. Otherwise -> 0.9
Answer with one short justification line, then a last line of the form `SCORE: <value>`."""

_SCORE = re.compile(r"score\s*[:=]?\s*\**\s*([01](?:\.\d+)?|\.\d+)", re.IGNORECASE)
_BARE = re.compile(r"^\s*([01](?:\.\d+)?|\.\d+)\s*$")


def parse_score(reply: Any) -> float | None:
    """The last `SCORE: x` (or a bare number reply) in [0, 1]; None otherwise."""
    if not isinstance(reply, str):
        return None
    found = _SCORE.findall(reply) or _BARE.findall(reply)
    if not found:
        return None
    value = float(found[-1])
    return value if 0.0 <= value <= 1.0 else None


def transcript(episode: Any, max_chars: int = 1200) -> str:
    """The episode's agent turns and tool results, truncated, with completion token counts."""
    lines = [f"User request: {episode.query}",
             f"Inference calls: {len(episode.completion_tokens)}; completion tokens per call: {episode.completion_tokens}"]
    for message in episode.messages:
        role = message.get("role")
        if role == "assistant":
            if message.get("reasoning_content"):
                lines.append(f"[agent thinks] {message['reasoning_content'][:max_chars]}")
            if message.get("content"):
                lines.append(f"[agent says] {message['content'][:max_chars]}")
            for call in message.get("tool_calls") or []:
                fn = call.get("function", {})
                lines.append(f"[agent calls] {fn.get('name')}({str(fn.get('arguments'))[:300]})")
        elif role == "tool":
            lines.append(f"[tool result] {str(message.get('content'))[:max_chars]}")
    return "\n".join(lines)


class ReasoningJudge:
    """Grades episodes through `client` (AsyncOpenAI or OpenAI) with `model`."""

    def __init__(self, client: Any, model: str, *, max_tokens: int = 256, timeout_s: float = 60.0) -> None:
        self.client, self.model = client, model
        self.max_tokens, self.timeout_s = max_tokens, timeout_s

    def request(self, episode: Any) -> list[dict[str, str]]:
        return [{"role": "system", "content": RUBRIC},
                {"role": "user", "content": "Transcript:\n" + transcript(episode)}]

    async def grade(self, episode: Any) -> float | None:
        try:
            reply = self.client.chat.completions.create(
                model=self.model, messages=self.request(episode), temperature=0.0,
                max_tokens=self.max_tokens, timeout=self.timeout_s,
            )
            if inspect.isawaitable(reply):
                reply = await asyncio.wait_for(reply, self.timeout_s)  # a total, not per read
            raw = reply.model_dump() if hasattr(reply, "model_dump") else reply
            return parse_score(raw["choices"][0]["message"]["content"])
        except Exception:  # a judge failure leaves the episode unjudged, never fails the eval
            return None

    def describe(self) -> str:
        return json.dumps({"judge_model": self.model, "rubric": "validator gate tree"})
