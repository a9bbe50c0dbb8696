"""Proxy evidence of a primary-dialect trace: what the validator's proxy saw, step by step.

The dialogue's content is rebuilt by the agent helper, so the structural filter judges the
primary dialect mainly on this log (the `proxy_evidence` column); see structural.py.

Newer ORO logs (src/agent/proxy_client.py after a6b1cf3) are read the same way: `kind:
"attempt"` entries (one per HTTP try, beside the call's `summary`) are not calls and are
skipped; catalogue calls dispatched as POSTs without `params` are /search/ calls by their path;
inference requests carrying the prompt (`messages`) and whole responses change nothing here
(only a head of the completion is kept).

Hot path (a few calls a step, every step of every primary trace): typed records (shapes.py:
an inference call's response is decoded with the record, a search call's products skipped)
and exact-type tests only, and a cache of what each distinct path means, since a day's calls
go to a handful of paths.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from shopdistill_assets.corpus.dialects.shapes import (
    Choice,
    ChoiceMessage,
    ExtraInfo,
    InferenceResponse,
    ProxyCall,
    RequestBody,
    Usage,
)
from shopdistill_assets.sandbox.tool_specs import TOOL_SCHEMAS

MAX_PROXY_CALLS_KEPT = 256  # per trace; the rest are only counted
PROXY_CONTENT_HEAD = 120  # characters of a logged completion kept for people to read
MAX_SEARCH_PATH_CHARS = 128

_EMITS_TOOL_CALL = re.compile("<tool_call>|" + "|".join(TOOL_SCHEMAS))

# path -> _INFERENCE, None (another proxy route), or the /search/ path as kept. Bounded: paths
# are miner-controlled, and a hostile day could send a new one per call.
_PATH_KINDS: dict[str, str | None] = {}
_PATH_KINDS_MAX = 4096
_INFERENCE = "inference"  # compared by identity: a kept search path always starts "/search/"
_UNSEEN = object()
_SUMMARY = "summary"  # RequestLog's one entry per call; newer ORO adds `attempt` entries per HTTP try


def _path_kind(path: str) -> str | None:
    """_INFERENCE, the /search/ path as kept (query string cut, bounded), or None for other;
    remembered in _PATH_KINDS, which callers look in first."""
    if path.startswith("/search/"):
        kind = path if len(path) <= MAX_SEARCH_PATH_CHARS and "?" not in path else path.split("?", 1)[0][:MAX_SEARCH_PATH_CHARS]
    elif path.startswith("/inference"):
        kind = _INFERENCE
    else:
        kind = None
    if len(_PATH_KINDS) < _PATH_KINDS_MAX:
        _PATH_KINDS[path] = kind
    return kind


def _inference_summary(call: ProxyCall) -> dict:
    """What one inference call shows: its limits, its size, whether it emitted a tool call."""
    ts = call.timestamp
    out: dict[str, Any] = {"ts": ts if type(ts) is int else None}
    body = call.json_data
    if type(body) is RequestBody:
        mt = body.max_tokens or body.max_completion_tokens
        out["max_tokens"] = mt if type(mt) is int else None
        if body.tools:
            out["tools"] = True
        if body.response_format is not None:
            out["response_format"] = True
    response = call.response
    if type(response) is InferenceResponse:
        usage = response.usage
        ct = usage.completion_tokens if type(usage) is Usage else None
        out["completion_tokens"] = ct if type(ct) is int else None
        choices = response.choices
        msg = choices[0].message if type(choices) is list and choices and type(choices[0]) is Choice else None
        if type(msg) is ChoiceMessage:
            content = msg.content
            if type(content) is str:
                out["content"] = content[:PROXY_CONTENT_HEAD]
                out["emits_tool_call"] = "<tool_call>" in content or _EMITS_TOOL_CALL.search(content) is not None
            if msg.tool_calls:
                out["emits_tool_call"] = True
    elif call.response_truncated:
        length = call.response_length
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

    def add_step(self, extra: ExtraInfo) -> None:
        calls = extra.proxy_calls
        inference: list[dict] = []
        search: list[str] = []
        other = 0
        if type(calls) is list and calls:
            room = MAX_PROXY_CALLS_KEPT - self.kept
            over = len(calls) - room
            bad = attempts = 0
            for call in calls if over <= 0 else calls[:room]:
                path = call.path if type(call) is ProxyCall else None
                if type(path) is not str:
                    bad += 1
                    continue
                if call.kind != _SUMMARY:
                    attempts += 1  # one HTTP try of a call whose summary is logged too: not a call
                    continue
                kind = _PATH_KINDS.get(path, _UNSEEN)
                if kind is _UNSEEN:
                    kind = _path_kind(path)
                if kind is _INFERENCE:
                    inference.append(_inference_summary(call))
                elif kind is None:
                    other += 1
                else:
                    search.append(kind)
            self.kept += (room if over > 0 else len(calls)) - bad - attempts
            self.dropped += bad + over if over > 0 else bad
        ts = extra.timestamp
        self.steps.append({"ts": ts if type(ts) is int else None, "inference": inference, "search": search, "other": other})

    def as_object(self) -> dict:
        """The `proxy_evidence` column's value before it is written as JSON."""
        return {"steps": self.steps, "dropped": self.dropped}

    def json(self) -> str:
        return orjson.dumps(self.as_object()).decode()
