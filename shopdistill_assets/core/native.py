"""The corpus path's per-row work in compiled code, with the Python reference behind it.

`decide_lines` has the contract of `core.decide.decide_lines` (the reference): raw lines of
one file in, one decided row per line out, as an Arrow batch of DECIDED_SCHEMA. The extension
(`_corpus_native`, built from native/*.c) reads each line once, and for the well-formed
records of the primary dialect writes the canonical row, the structural decision and the gate
verdict straight into Arrow buffers. Every other line (the other dialects, records the
reference rejects while reading, anything the C code cannot reproduce byte for byte) it hands
to the reference, one line at a time, in place: so the batch equals the reference's.

The switch: SHOPDISTILL_CORPUS_PATH=reference (or native) in the environment; by default the
native path runs where the extension is built and the configuration allows it (an exact
tokenizer for the token limit is the reference's alone).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import orjson
import pyarrow as pa

from shopdistill_assets.sandbox.tool_specs import TOOL_SCHEMAS

from . import decide as reference
from .dialects import CATALOGUE_TOOLS, MAX_QUERY_CHARS, MAX_STEPS, MAX_TOOL_CALLS, PRIMARY, SYSTEM_PROMPT
from .gates import argument_error
from .lines import MAX_LINE_BYTES
from .reasons import REASON_STAGE

try:
    from . import _corpus_native
except ImportError:  # not built (no compiler): the reference runs alone
    _corpus_native = None

PATH_ENV = "SHOPDISTILL_CORPUS_PATH"
DECIDED_SCHEMA = reference.DECIDED_SCHEMA
# The argument patterns the C code matches itself; any other pattern defers the call's line.
_PATTERNS = {r"^\d*(\.\d+)?-\d*(\.\d+)?$": 1,
             r"^(official|freeShipping|COD|flashsale|default)(,(official|freeShipping|COD|flashsale|default))*$": 2}
_TYPES = {"string": 1, "integer": 2, "number": 3}
_LABELS = {"agentic": 0, "subtask": 1, "reject": 2}


def available() -> bool:
    """Whether the extension is built and importable here."""
    return _corpus_native is not None


def path_for(cfg: reference.DecideConfig) -> str:
    """"native" or "reference": the environment's choice, else native where it can run."""
    wanted = os.environ.get(PATH_ENV, "").strip().lower()
    if wanted not in ("", "native", "reference"):
        raise ValueError(f"{PATH_ENV} must be 'native' or 'reference', not {wanted!r}")
    if wanted == "reference" or not available() or cfg.gates.tokenizer_path:
        return "reference"
    return "native"


def _prop(key: str, spec: dict[str, Any]) -> tuple:
    enum = spec.get("enum")
    if enum is not None and not all(isinstance(v, str) for v in enum):
        raise ValueError(f"enum of {key} is not all strings")
    pattern = spec.get("pattern")
    return (key, _TYPES.get(spec.get("type"), 0), spec.get("minLength"), spec.get("minimum"), spec.get("maximum"),
            0 if pattern is None else _PATTERNS.get(pattern, 3), None if enum is None else list(enum))


def native_config(cfg: reference.DecideConfig) -> dict[str, Any]:
    """Everything the C code decides with, taken from the same sources as the reference."""
    s, g = cfg.structural, cfg.gates
    judged = PRIMARY in g.judged_dialects
    null_policy = g.null_reasoning_score_policy if judged else g.missing_judge_policy
    tools = []
    for name, schema in TOOL_SCHEMAS.items():
        params = schema["function"]["parameters"]
        tools.append((name, orjson.dumps(schema).decode(), name in CATALOGUE_TOOLS, list(params["required"]),
                      [_prop(k, v) for k, v in params["properties"].items()]))

    def fallback(source_file: str, source_line: int, raw: bytes, day: str) -> dict[str, Any]:
        return reference.decide_line(source_file, source_line, raw, day, cfg)

    return {
        "tools": tools, "system_prompt": SYSTEM_PROMPT,
        "search_excess_ratio": s.search_excess_ratio, "search_excess_min": s.search_excess_min,
        "classify_max_tokens": s.classify_max_tokens, "short_completion_tokens": s.short_completion_tokens,
        "classify_share": s.classify_share, "terse_think_chars": s.terse_think_chars,
        "templated_share": s.templated_share, "templated_min_turns": s.templated_min_turns,
        "subtask_threshold": s.subtask_threshold, "no_evidence_label": _LABELS[s.no_evidence_label],
        "no_inference_label": _LABELS[s.no_inference_label],
        "min_reasoning_score": g.min_reasoning_score, "null_score_reject": int(null_policy == "reject"),
        "null_score_detail": ("judged dialect with a null reasoning_score" if judged
                              else f"{PRIMARY} carries no judge score"),
        "allow_extra": int(g.allow_extra_arguments), "max_tokens": g.max_tokens,
        "argument_error": lambda name, arguments: argument_error(name, arguments, g.allow_extra_arguments),
        "max_line_bytes": MAX_LINE_BYTES, "max_steps": MAX_STEPS, "max_tool_calls": MAX_TOOL_CALLS,
        "max_query_chars": MAX_QUERY_CHARS, "stages": dict(REASON_STAGE), "fallback": fallback,
    }


@lru_cache(maxsize=8)
def _decider(cfg: reference.DecideConfig) -> Any:
    if tuple(_corpus_native.COLUMNS) != tuple(DECIDED_SCHEMA.names):  # a build out of step with decide.py
        raise RuntimeError(f"the C extension writes {_corpus_native.COLUMNS}, DECIDED_SCHEMA has "
                           f"{DECIDED_SCHEMA.names}: rebuild it (make native) or update native/columns.c")
    return _corpus_native.Decider(native_config(cfg))


def _array(field: pa.Field, n: int, parts: tuple[bytes, bytes | None, bytes | None]) -> pa.Array:
    first, data, valid = parts
    validity = None if valid is None else pa.py_buffer(valid)
    if data is None:  # int64 / float64 (doubles arrive bit for bit)
        return pa.Array.from_buffers(field.type, n, [validity, pa.py_buffer(first)])
    return pa.Array.from_buffers(field.type, n, [validity, pa.py_buffer(first), pa.py_buffer(data)])


def decide_lines(source_file: str, first_line: int, lines: Sequence[bytes], day: str,
                 cfg: reference.DecideConfig) -> pa.RecordBatch:
    """`core.decide.decide_lines`, through the compiled fast path where it runs."""
    if path_for(cfg) != "native":
        return reference.decide_lines(source_file, first_line, lines, day, cfg)
    columns, n, _fast = _decider(cfg).decide(source_file, first_line, list(lines), day)
    arrays = [_array(f, n, parts) for f, parts in zip(DECIDED_SCHEMA, columns)]
    return pa.RecordBatch.from_arrays(arrays, schema=DECIDED_SCHEMA)


def fast_share(source_file: str, first_line: int, lines: Sequence[bytes], day: str,
               cfg: reference.DecideConfig) -> float:
    """The share of `lines` the C code decided itself (for tests and the benchmark)."""
    _columns, n, fast = _decider(cfg).decide(source_file, first_line, list(lines), day)
    return fast / n if n else 1.0
