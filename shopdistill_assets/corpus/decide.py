"""The corpus path's per-row work as one pure function: raw lines in, one decided row per line out.

    decide_lines(source_file, first_line, lines, day, cfg) -> pyarrow.RecordBatch (DECIDED_SCHEMA)

The one implementation, plain Python over the per-stage functions of normalize, structural
and gates. Contract:

- Input: `lines[i]` is the raw line numbered `first_line + i` of `source_file` (1-based), as
  the line reader gives it: bytes without the newline or trailing "\\r", at most
  MAX_LINE_BYTES long (longer ones never reach this function: the reader logs them). `day` is
  the partition (YYYY-MM-DD). `cfg` holds every threshold (DecideConfig). Nothing else is read:
  no clock, no randomness, no file; the same arguments give the same batch.
- Output: exactly `len(lines)` rows, in input order, with `day`, `source_file` and
  `source_line` always set, and one of two shapes:
  * a line stopped before it is a trace: `stage` = "read" or "normalize", `reason` (a code of
    corpus/reasons.py), `detail`, `raw_line` (its first RAW_LINE_LIMIT bytes as UTF-8 with
    replacement; a truncation note ends `detail`), the identity columns (trace_id,
    eval_run_id, problem_id, miner_hotkey) where the record yielded them; all other columns
    null. This is normalize.iter_records's ledger row.
  * a trace: every canonical column as normalize.iter_records gives it, `updated_at_us`
    (core/recency.py: the dedupe key, with trace_id), `structural_label` (agentic | subtask |
    reject) and `structural_evidence` (JSON text) from structural.classify, and
      - label "reject": stage "structural", its reason, detail = the decision's note or, when
        it has none, the evidence JSON;
      - label "agentic": the first failure of reasoning_gate then format_gate, if any
        (stage, reason, detail), else stage/reason/detail null;
      - label "subtask": stage/reason/detail null (sub-task traces are not gated).
    `raw_line` is null on trace rows.
  Dedupe is NOT decided here (it needs the whole day): the caller applies `superseded`.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from shopdistill_assets.core.recency import updated_at_us
from shopdistill_assets.corpus.dialects import CANONICAL_COLUMNS, record_identity
from shopdistill_assets.corpus.gates import GateConfig, format_gate, reasoning_gate
from shopdistill_assets.corpus.normalize import LEDGER_COLUMNS, ledger_row, normalize_record, parse_line
from shopdistill_assets.corpus.reasons import Rejection
from shopdistill_assets.corpus.structural import StructuralConfig, classify

_INT_COLUMNS = {"race_id", "suite_id", "inference_total", "inference_failure_count", "n_steps", "n_tool_calls",
                "source_line"}
_FLOAT_COLUMNS = {"score", "reasoning_score", "reasoning_coef", "execution_time"}
_LARGE_COLUMNS = {"messages", "tools", "proxy_evidence", "raw_line"}


def column_type(column: str) -> pa.DataType:
    if column in _INT_COLUMNS:
        return pa.int64()
    if column in _FLOAT_COLUMNS:
        return pa.float64()
    return pa.large_string() if column in _LARGE_COLUMNS else pa.string()


CANONICAL_SCHEMA = pa.schema([(c, column_type(c)) for c in CANONICAL_COLUMNS])
STRUCTURAL_SCHEMA = CANONICAL_SCHEMA.append(pa.field("structural_label", pa.string())).append(
    pa.field("structural_evidence", pa.string()))
LEDGER_SCHEMA = pa.schema([(c, column_type(c)) for c in LEDGER_COLUMNS])
# agentic_traces is the structural filter's verdict between normalized and gated (not one of
# DESIGN.md's contract tables): identity, scores and evidence, without the trace text that
# normalized_traces and gated_traces already carry (writing it a third time cost a third of the split).
TRACE_TEXT_COLUMNS = ("messages", "tools", "proxy_evidence")
AGENTIC_SCHEMA = pa.schema([f for f in STRUCTURAL_SCHEMA if f.name not in TRACE_TEXT_COLUMNS])
DECIDED_SCHEMA = pa.schema([*STRUCTURAL_SCHEMA, pa.field("updated_at_us", pa.int64()),
                            *(LEDGER_SCHEMA.field(c) for c in ("stage", "reason", "detail", "raw_line"))])


@dataclass(frozen=True)
class DecideConfig:
    """Every threshold of the per-row work (the corpus stage config, as plain data)."""

    structural: StructuralConfig = field(default_factory=StructuralConfig)
    gates: GateConfig = field(default_factory=GateConfig)


def decide_line(source_file: str, source_line: int, raw: bytes, day: str, cfg: DecideConfig,
                counts: Counter | None = None) -> dict[str, Any]:
    """One line's decided row (a dict with DECIDED_SCHEMA's keys, missing ones null). `counts`:
    the trace checks' counters (reasons.count_run), when given."""
    obj = parse_line(raw)
    if isinstance(obj, Rejection):
        return ledger_row(obj, day=day, source_file=source_file, source_line=source_line, raw=raw)
    parsed: dict[str, Any] = {}
    out = normalize_record(obj, day=day, source_file=source_file, source_line=source_line, parsed=parsed)
    if isinstance(out, Rejection):
        return ledger_row(out, day=day, source_file=source_file, source_line=source_line, raw=raw,
                          identity=record_identity(obj))
    row: dict[str, Any] = out  # type: ignore[assignment]
    row["updated_at_us"] = updated_at_us(row["updated_at"])
    decision = classify(row, cfg.structural, messages=parsed["messages"], evidence=parsed["evidence"], counts=counts)
    row["structural_label"] = decision.label
    row["structural_evidence"] = evidence = decision.evidence_json()
    rejection = decision.rejection()
    if rejection is not None:
        rejection = Rejection(rejection.stage, rejection.reason, rejection.detail or evidence)
    elif decision.label == "agentic":
        rejection = reasoning_gate(row, cfg.gates, counts) or format_gate(row, cfg.gates, messages=parsed["messages"],
                                                                          counts=counts)
    if rejection is not None:
        row["stage"], row["reason"], row["detail"] = rejection.stage, rejection.reason, rejection.detail
    return row


def decide_lines(source_file: str, first_line: int, lines: Sequence[bytes], day: str,
                 cfg: DecideConfig, counts: Counter | None = None) -> pa.RecordBatch:
    """The decided rows of `lines` (see the module doc for the contract); `counts` receives
    the trace checks' counters."""
    # A batch allocates millions of small, acyclic objects (parsed records, messages): the
    # cyclic collector's passes over them cost ~10 % of the batch and find nothing. Paused for
    # one batch only (bounded by BATCH_ROWS / BATCH_BYTES), so any cycle is collected after it.
    paused = gc.isenabled()
    gc.disable()
    try:
        rows = [decide_line(source_file, first_line + i, raw, day, cfg, counts) for i, raw in enumerate(lines)]
    finally:
        if paused:
            gc.enable()
    return pa.RecordBatch.from_pylist(rows, DECIDED_SCHEMA)
