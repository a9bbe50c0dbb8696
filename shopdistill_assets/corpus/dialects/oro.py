"""What ORO writes before the validator's result is joined to it, read as it is.

- `oro.sandbox_output`: one line of the sandbox's `output.jsonl` (src/agent/sandbox_executor.py):
  `{problem_id, status, execution_time, inference_total, inference_failure_count, error,
  dialogue}`; a FAILED run has `dialogue: null`.
- `oro.upload`: the per-problem file ORO uploads and serves (subnet/validator/output_split.py):
  the bare JSON list of the envelope's steps; a run that produced nothing is `[]`.
- `oro.environment_episode.v1`: a generated-environment episode (`{schema_version, episode}`):
  recognized so it is counted under its own reason, never read as a shopping trace.

Both readable shapes hold the primary dialect's steps (results riding on each call, proxy
calls in each step's extra_info), so they share its step reader. Neither carries the run's
identity (`eval_run_id`), a miner or a judge score: their trace id is the dialect, the
problem id and a digest of the content, and the reasoning gate treats them as unjudged.
"""

from __future__ import annotations

from typing import Any

import msgspec

from shopdistill_assets.core.identity import MAX_ID_CHARS
from shopdistill_assets.corpus.dialects.common import (
    ORO_ENVELOPE,
    ORO_EPISODE,
    ORO_UPLOAD,
    CanonicalTrace,
    _bad_type,
    _content_digest,
    _dict,
    _str,
    _violation,
    failed_run,
    make_trace_id,
)
from shopdistill_assets.corpus.dialects.dialogue import _row
from shopdistill_assets.corpus.dialects.problem_run import read_query_and_steps
from shopdistill_assets.corpus.dialects.shapes import EMPTY_EXTRA, STEPS, ExtraInfo, shape_rejection, typed
from shopdistill_assets.corpus.reasons import Reason, Rejection

_ENVELOPE_KEYS = ("status", "dialogue")


def is_envelope(obj: Any) -> bool:
    """The sandbox's output.jsonl line: status and dialogue, no schema and no run identity."""
    return (isinstance(obj, dict) and obj.get("schema") is None and "eval_run_id" not in obj
            and all(k in obj for k in _ENVELOPE_KEYS))


def is_upload(obj: Any) -> bool:
    """ORO's per-problem upload: a list of steps without prompts (a rollout's steps carry the
    prompt that holds their results), or `[]`."""
    if not isinstance(obj, list):
        return False
    return not obj or (isinstance(obj[0], dict) and "completion" in obj[0] and "prompt" not in obj[0])


def is_episode(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("schema_version") == ORO_EPISODE


def _problem_id(v: Any) -> str | None:
    return v if type(v) is str and 0 < len(v) <= MAX_ID_CHARS else None


def _read_oro_steps(dialect: str, dialogue: list, header: dict, obj: Any, *, day: str, source_file: str,
                    source_line: int, parsed: dict | None) -> CanonicalTrace | Rejection:
    """The canonical row of ORO steps; `header` holds the run-level fields the shape carries."""
    try:
        steps_typed = typed(dialogue, STEPS)
    except msgspec.ValidationError as err:
        return shape_rejection(err, "dialogue")
    first = steps_typed[0].extra_info
    if type(first) is not ExtraInfo:
        first = EMPTY_EXTRA
    query = _str(first.query)
    steps = read_query_and_steps(steps_typed, query, "dialogue[0].extra_info.query")
    if isinstance(steps, Rejection):
        return steps
    convo, evidence = steps
    problem_id = _problem_id(header.get("problem_id")) or _problem_id(first.problem_id)
    header.setdefault("execution_time", first.execution_time)
    trace_id = make_trace_id(dialect, problem_id or "", _content_digest(obj))
    return _row(
        dialect, convo, {"problem_id": problem_id}, header, {}, query, day, source_file, source_line,
        trace_id=trace_id, proxy_evidence=evidence.as_object(), parsed=parsed,
    )


def read_envelope(obj: Any, *, day: str, source_file: str, source_line: int,
                  parsed: dict | None = None) -> CanonicalTrace | Rejection:
    """Dialect `oro.sandbox_output`: the sandbox's output.jsonl line for one problem."""
    if not isinstance(obj, dict):
        return _violation("a sandbox output line must be an object")
    status, dialogue = obj.get("status"), obj.get("dialogue")
    if status is not None and not isinstance(status, str):
        return _bad_type("status", status)
    if dialogue is not None and not isinstance(dialogue, list):
        return _bad_type("dialogue", dialogue)
    if failed := failed_run(status, dialogue):
        return failed
    if not dialogue:
        return Rejection.of(Reason.EMPTY_DIALOGUE, f"status={status!s}, no steps")
    header = {k: obj.get(k) for k in ("problem_id", "status", "execution_time", "inference_total",
                                      "inference_failure_count")}
    return _read_oro_steps(ORO_ENVELOPE, dialogue, header, obj, day=day, source_file=source_file,
                           source_line=source_line, parsed=parsed)


def read_upload(obj: Any, *, day: str, source_file: str, source_line: int,
                parsed: dict | None = None) -> CanonicalTrace | Rejection:
    """Dialect `oro.upload`: the bare list of one problem's steps, as ORO uploads it."""
    if not isinstance(obj, list):
        return _violation("an ORO upload must be a list of steps")
    if not obj:
        # output_split writes [] for a run whose envelope had no dialogue: FAILED or TIMED_OUT.
        return Rejection.of(Reason.FAILED_RUN, "empty upload: ORO writes [] for a run that produced no steps")
    return _read_oro_steps(ORO_UPLOAD, obj, {}, obj, day=day, source_file=source_file,
                           source_line=source_line, parsed=parsed)


def read_episode(obj: Any, *, day: str, source_file: str, source_line: int,
                 parsed: dict | None = None) -> CanonicalTrace | Rejection:
    """Dialect `oro.environment_episode.v1`: counted under its own reason, not read."""
    episode = _dict(obj.get("episode")) if isinstance(obj, dict) else {}
    kind = _str(episode.get("family")) or _str(episode.get("environment")) or "unnamed"
    return Rejection.of(Reason.ENVIRONMENT_EPISODE, f"environment episode ({kind[:60]}): no shopping dialogue")
