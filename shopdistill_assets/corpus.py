"""The corpus path as daily assets: normalize -> structural filter -> gates, and the ledger.

    raw_firehose ─► normalized_traces ─► agentic_traces ─► gated_traces
                                     └─► subtask_traces
    every stage's rejections (lake tables ledger_normalize / ledger_structural / ledger_gates)
      ─► rejected_traces, with the blocking conservation check

The work itself is `core.corpus_parts`, run one part per process; these assets only move
parts between the lake and that code and say what happened.
"""

# No `from __future__ import annotations`: Dagster reads the annotations of context and resources.
import shutil
from pathlib import Path
from typing import Literal

from dagster import (
    AssetCheckResult,
    AssetExecutionContext,
    AssetOut,
    Config,
    Failure,
    MaterializeResult,
    asset,
    asset_check,
    multi_asset,
)
from pydantic import Field

from resources.firehose import FirehoseDayMissing, FirehoseResource
from resources.lake import LakeResource
from shopdistill_assets.core import corpus_parts as parts
from shopdistill_assets.core.gates import GateConfig
from shopdistill_assets.core.structural import StructuralConfig
from shopdistill_assets.funnel import funnel_metadata
from shopdistill_assets.ingest import raw_firehose
from shopdistill_assets.partitions import daily_partitions
from shopdistill_assets.parts_pool import default_workers, run_parts

LEDGER_TABLES = ("ledger_normalize", "ledger_structural", "ledger_gates")


class StageConfig(Config):
    workers: int = Field(default_factory=default_workers, description="processes; one part per task")


class StructuralStageConfig(StageConfig):
    subtask_threshold: int = Field(StructuralConfig.subtask_threshold, description="evidence score at which a trace is sub-task")
    no_evidence_label: Literal["agentic", "subtask", "reject"] = Field(
        StructuralConfig.no_evidence_label, description="primary-dialect traces with no proxy log")


class GateStageConfig(StageConfig):
    min_reasoning_score: float = Field(GateConfig.min_reasoning_score, description="keep judge score >= this")
    missing_judge_policy: Literal["keep", "reject"] = Field(
        GateConfig.missing_judge_policy, description="dialects that carry no judge score")
    null_reasoning_score_policy: Literal["keep", "reject"] = Field(
        GateConfig.null_reasoning_score_policy, description="judged dialect with a null score")
    max_tokens: int = Field(GateConfig.max_tokens, description="hard limit on the rendered trace")
    tokenizer_path: str | None = Field(None, description="local HF tokenizer for exact counts; default: estimate")


def _firehose_params(firehose: FirehoseResource) -> dict:
    return {k: getattr(firehose, k) for k in FirehoseResource.model_fields}


def _normalize_file(day: str, params: dict, file, out_path: Path) -> parts.PartResult:
    firehose = FirehoseResource(**params)
    return parts.normalize_part(day, file.name, lambda: firehose.open_day_file(file), out_path)


def _write_ledger(lake: LakeResource, table: str, day: str, rows: list[dict], scratch: Path) -> None:
    path = scratch / f"{table}.parquet"
    parts.write_ledger(rows, path)
    lake.write_day_parts(table, day, [path])


def _list_day(firehose: FirehoseResource, day: str):
    try:
        return firehose.list_day(day)
    except FirehoseDayMissing as exc:
        raise Failure(description=str(exc), allow_retries=False) from exc


@asset(partitions_def=daily_partitions, group_name="corpus", deps=[raw_firehose], kinds={"python", "parquet"},
       description="One canonical row (OpenAI tool-calls schema) per problem run; re-uploads deduped within the day.")
def normalized_traces(context: AssetExecutionContext, config: StageConfig, firehose: FirehoseResource,
                      lake: LakeResource) -> MaterializeResult:
    day = context.partition_key
    files = _list_day(firehose, day)
    scratch = lake.scratch_dir()
    try:
        staged = [scratch / f"staged-{i:05d}.parquet" for i in range(len(files))]
        params = _firehose_params(firehose)
        results = run_parts(_normalize_file, [(day, params, f, p) for f, p in zip(files, staged)], config.workers)
        losers = parts.superseded(key for r in results for key in r.keys)
        finals = [scratch / f"final-{i:05d}.parquet" for i in range(len(files))]
        deduped = run_parts(parts.dedupe_part, [(s, f, losers) for s, f in zip(staged, finals)], config.workers)
        ledger = [row for r in results for row in r.ledger] + [row for r in deduped for row in r.ledger]
        lake.write_day_parts("normalized_traces", day, finals)
        _write_ledger(lake, "ledger_normalize", day, ledger, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    units = sum(r.units for r in results)
    kept = sum(r.kept for r in deduped)
    context.log.info(f"{day}: {units} lines from {len(files)} files -> {kept} traces, {len(ledger)} rejected")
    return MaterializeResult(metadata=funnel_metadata(units, kept, ledger, files=len(files),
                                                      superseded=len(losers)))


@multi_asset(
    partitions_def=daily_partitions, group_name="corpus", deps=[normalized_traces],
    outs={"agentic_traces": AssetOut(kinds={"python", "parquet"},
                                     description="Traces where the LLM emitted the tool calls (axis A), with evidence."),
          "subtask_traces": AssetOut(kinds={"python", "parquet"},
                                     description="Traces where a harness drove the tools (axis B): kept for later lifting.")},
)
def structural_traces(context: AssetExecutionContext, config: StructuralStageConfig, lake: LakeResource):
    day = context.partition_key
    cfg = StructuralConfig(subtask_threshold=config.subtask_threshold, no_evidence_label=config.no_evidence_label)
    scratch = lake.scratch_dir()
    try:
        inputs = lake.day_part_files("normalized_traces", day, scratch)
        agentic = [scratch / f"agentic-{i:05d}.parquet" for i in range(len(inputs))]
        subtask = [scratch / f"subtask-{i:05d}.parquet" for i in range(len(inputs))]
        results = run_parts(parts.structural_part, [(p, a, s, cfg) for p, a, s in zip(inputs, agentic, subtask)],
                            config.workers)
        ledger = [row for r in results for row in r.ledger]
        lake.write_day_parts("agentic_traces", day, agentic)
        lake.write_day_parts("subtask_traces", day, subtask)
        _write_ledger(lake, "ledger_structural", day, ledger, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    n_in = sum(r.units for r in results)
    n_agentic = sum(r.outputs["agentic_traces"] for r in results)
    n_subtask = sum(r.outputs["subtask_traces"] for r in results)
    yield MaterializeResult(asset_key="agentic_traces", metadata=funnel_metadata(
        n_in, n_agentic, ledger, subtask=n_subtask, agentic_share=round(n_agentic / n_in, 4) if n_in else 0.0))
    yield MaterializeResult(asset_key="subtask_traces", metadata={"dagster/row_count": n_subtask, "in": n_in,
                                                                  "kept": n_subtask})


@asset(partitions_def=daily_partitions, group_name="corpus", deps=["agentic_traces"], kinds={"python", "parquet"},
       description="Agentic traces that pass the reasoning-coefficient gate and the format-validity gate.")
def gated_traces(context: AssetExecutionContext, config: GateStageConfig, lake: LakeResource) -> MaterializeResult:
    day = context.partition_key
    cfg = GateConfig(min_reasoning_score=config.min_reasoning_score, missing_judge_policy=config.missing_judge_policy,
                     null_reasoning_score_policy=config.null_reasoning_score_policy, max_tokens=config.max_tokens,
                     tokenizer_path=config.tokenizer_path)
    scratch = lake.scratch_dir()
    try:
        inputs = lake.day_part_files("agentic_traces", day, scratch)
        outputs = [scratch / f"gated-{i:05d}.parquet" for i in range(len(inputs))]
        results = run_parts(_gate_part, [(p, o, cfg) for p, o in zip(inputs, outputs)], config.workers)
        ledger = [row for r in results for row in r.ledger]
        lake.write_day_parts("gated_traces", day, outputs)
        _write_ledger(lake, "ledger_gates", day, ledger, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    n_in = sum(r.units for r in results)
    return MaterializeResult(metadata=funnel_metadata(n_in, sum(r.kept for r in results), ledger))


def _gate_part(in_path: Path, out_path: Path, cfg: GateConfig) -> parts.PartResult:
    tokenizer = None
    if cfg.tokenizer_path:
        from shopdistill_assets.core.tokens import load_tokenizer

        tokenizer = load_tokenizer(cfg.tokenizer_path)
    return parts.gate_part(in_path, out_path, cfg, tokenizer)


@asset(partitions_def=daily_partitions, group_name="corpus",
       deps=[normalized_traces, "agentic_traces", gated_traces], kinds={"python", "parquet"},
       description="The ledger: every input line that did not reach gated_traces or subtask_traces, with stage and reason.")
def rejected_traces(context: AssetExecutionContext, lake: LakeResource) -> MaterializeResult:
    day = context.partition_key
    rows = [row for table in LEDGER_TABLES for row in lake.read_day(table, day).to_dicts()]
    scratch = lake.scratch_dir()
    try:
        _write_ledger(lake, "rejected_traces", day, rows, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    by_stage = {}
    for row in rows:
        by_stage[row["stage"]] = by_stage.get(row["stage"], 0) + 1
    meta = funnel_metadata(len(rows), len(rows), rows, **{f"stage/{k}": v for k, v in sorted(by_stage.items())})
    meta.pop("kept_share")
    return MaterializeResult(metadata=meta)


def _count_file_units(day: str, params: dict, file) -> int:
    firehose = FirehoseResource(**params)
    with firehose.open_day_file(file) as stream:
        return sum(1 for _ in parts.read_units(file.name, stream, day))


def count_units(firehose: FirehoseResource, day: str, workers: int = 1) -> int:
    """Lines of the day's files, counted afresh (a damaged file's error counts as one unit)."""
    params = _firehose_params(firehose)
    return sum(run_parts(_count_file_units, [(day, params, f) for f in firehose.list_day(day)], workers))


@asset_check(asset=rejected_traces, blocking=True,
             description="Conservation: lines read == gated_traces + subtask_traces + rejected_traces, "
                         "and every (source_file, source_line) lands exactly once.")
def conservation(context, firehose: FirehoseResource, lake: LakeResource) -> AssetCheckResult:
    import duckdb

    day = context.partition_key if context.has_partition_key else None
    if day is None:
        return AssetCheckResult(passed=False, description="run this check for one day partition")
    units = count_units(firehose, day, default_workers())
    tables = {t: lake.read_day_columns(t, day, ["source_file", "source_line"])
              for t in ("gated_traces", "subtask_traces", "rejected_traces")}
    con = duckdb.connect()
    for name, table in tables.items():
        con.register(name, table)
    total, distinct = con.execute(
        "SELECT count(*), count(DISTINCT (source_file, source_line)) FROM "
        "(SELECT * FROM gated_traces UNION ALL SELECT * FROM subtask_traces UNION ALL SELECT * FROM rejected_traces)"
    ).fetchone()
    counts = {name: t.num_rows for name, t in tables.items()}
    passed = total == units and distinct == total
    return AssetCheckResult(passed=passed, metadata={"lines_read": units, "accounted": total,
                                                     "duplicates": total - distinct, **counts},
                            description=None if passed else f"{units} lines read but {total} rows accounted "
                                                            f"({total - distinct} duplicates)")


CORPUS_ASSETS = [normalized_traces, structural_traces, gated_traces, rejected_traces]
CORPUS_CHECKS = [conservation]
