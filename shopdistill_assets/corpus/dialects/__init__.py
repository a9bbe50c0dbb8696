"""Dialect readers: one firehose record (a parsed JSON value) -> a canonical trace row.

Five dialects are read (contracts/sn15-firehose.md): the primary `sn15.problem_run/v1`
(problem_run.py); what ORO writes before the validator's result is joined, the sandbox's
`oro.sandbox_output` line and the bare per-problem `oro.upload` (oro.py); upstream
`shoppingbench.rollout` (rollout.py); and already-canonical `openai.messages`
(openai_messages.py). A sixth, `oro.environment_episode.v1`, is recognized and counted
under its own reason. Each is detected per record, never per file. A reader
never raises on hostile input and never trusts a type: whatever the record holds, it returns
either a canonical row (a plain dict, see `CanonicalTrace`) or a `Rejection`. Readers judge
only *shape*; whether a well-shaped trace is good training data is for the structural filter
and the gates.

The tool schemas come from `sandbox.tool_specs.TOOL_SCHEMAS`, the single source: the canonical
`tools` column, the format gate and the sandbox all read it (re-exported here for callers that
import it from the dialects).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shopdistill_assets.core.identity import MAX_ID_CHARS
from shopdistill_assets.corpus.dialects.common import (
    CANONICAL_COLUMNS,
    CATALOGUE_TOOLS,
    MAX_MESSAGES,
    MAX_QUERY_CHARS,
    MAX_STEPS,
    MAX_TOOL_CALLS,
    OPENAI,
    ORO_ENVELOPE,
    ORO_EPISODE,
    ORO_UPLOAD,
    PRIMARY,
    ROLLOUT,
    SYSTEM_PROMPT,
    CanonicalTrace,
    make_trace_id,
    parse_updated_at,
    reasoning_coef,
    split_think,
    tools_json,
)
from shopdistill_assets.corpus.dialects.openai_messages import read_openai_messages
from shopdistill_assets.corpus.dialects.oro import (
    is_envelope,
    is_episode,
    is_upload,
    read_envelope,
    read_episode,
    read_upload,
)
from shopdistill_assets.corpus.dialects.problem_run import read_problem_run
from shopdistill_assets.corpus.dialects.proxy_evidence import MAX_PROXY_CALLS_KEPT, PROXY_CONTENT_HEAD
from shopdistill_assets.corpus.dialects.rollout import read_rollout
from shopdistill_assets.corpus.dialects.shapes import ProblemRun
from shopdistill_assets.corpus.reasons import Reason, Rejection
from shopdistill_assets.sandbox.tool_specs import TOOL_SCHEMAS

__all__ = [
    "CANONICAL_COLUMNS", "CATALOGUE_TOOLS", "DIALECTS", "MAX_ID_CHARS", "MAX_MESSAGES",
    "MAX_PROXY_CALLS_KEPT", "MAX_QUERY_CHARS", "MAX_STEPS", "MAX_TOOL_CALLS",
    "OPENAI", "ORO_ENVELOPE", "ORO_EPISODE", "ORO_UPLOAD", "PRIMARY", "PROXY_CONTENT_HEAD", "ROLLOUT", "SYSTEM_PROMPT", "TOOL_SCHEMAS", "CanonicalTrace",
    "Dialect", "Reader", "Reason", "Rejection", "detect_dialect", "make_trace_id", "parse_updated_at",
    "read_envelope", "read_openai_messages", "read_problem_run", "read_upload", "read_rollout", "reasoning_coef", "record_identity",
    "split_think", "tools_json",
]


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
    """Upstream's steps carry the prompt (whose <obs> blocks hold the results); ORO's do not."""
    return isinstance(obj, list) and bool(obj) and isinstance(obj[0], dict) and "completion" in obj[0] \
        and "prompt" in obj[0]


def _is_openai(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("schema") is None and "messages" in obj


DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (
        Dialect(PRIMARY, _is_primary, read_problem_run),
        Dialect(ORO_ENVELOPE, is_envelope, read_envelope),
        Dialect(ORO_EPISODE, is_episode, read_episode),
        Dialect(ROLLOUT, _is_rollout, read_rollout),
        Dialect(ORO_UPLOAD, is_upload, read_upload),
        Dialect(OPENAI, _is_openai, read_openai_messages),
    )
}


def detect_dialect(obj: Any) -> str | None:
    """The name of the first dialect whose shape test accepts obj; None when none does."""
    for d in DIALECTS.values():
        if d.detect(obj):
            return d.name
    return None


def _dict_get(v: Any, key: str) -> Any:
    return v.get(key) if isinstance(v, dict) else None


def record_identity(obj: Any) -> dict[str, str | None]:
    """Best-effort ids of a record, even a rejected one, for its ledger row."""
    out: dict[str, str | None] = {"trace_id": None, "eval_run_id": None, "problem_id": None, "miner_hotkey": None}
    if isinstance(obj, ProblemRun):  # a typed primary record: its ids are already checked strings
        obj = {k: getattr(obj, k) for k in ("eval_run_id", "problem_id", "miner_hotkey")}
    if isinstance(obj, list) and obj and isinstance(obj[0], dict):  # an ORO upload names its problem per step
        obj = {"problem_id": _dict_get(obj[0].get("extra_info"), "problem_id")}
    if isinstance(obj, dict):
        for key in ("eval_run_id", "problem_id", "miner_hotkey"):
            v = obj.get(key)
            out[key] = v if isinstance(v, str) and len(v) <= MAX_ID_CHARS else None
        if out["eval_run_id"] and out["problem_id"]:
            out["trace_id"] = make_trace_id(out["eval_run_id"], out["problem_id"])
    return out
