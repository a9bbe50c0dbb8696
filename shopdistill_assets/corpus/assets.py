"""The corpus path as one Dagster step per day: five named tables from one pass per line.

    raw_firehose ─► corpus  (one multi_asset; selecting one table runs the whole pass)
                     ├─ normalized_traces  one canonical row per problem run; re-uploads deduped in the day
                     ├─ agentic_traces     the structural filter's axis A (the LLM emitted the tool calls)
                     ├─ subtask_traces     axis B (a harness drove the tools): kept for later lifting
                     ├─ gated_traces       agentic traces past the reasoning gate and the format gate
                     └─ rejected_traces    the ledger: every other line, with stage, reason, detail
    conservation (blocking, on each of the five): lines read == gated + subtask + rejected
    check_counts (blocking, on agentic_traces and gated_traces, evaluated in the step): the named
                  checks' own counters agree with the ledger and the tables (corpus/check_funnel.py)

The funnel metadata of the check stages (structural filter, reasoning gate, format gate) comes
from the checks' counters, merged across the worker processes; the other stages' from the
ledger rows the split wrote. The five are computed together and always written together (a subset selection records the
unselected tables as materialization events), so no table can be re-run alone with another
config and leave the day's tables inconsistent. The files read are
exactly those `raw_firehose` inventoried for the day, checked against their sha256 as they are
read. The work itself is `core.corpus_parts`, one task per file in a process pool.
"""

# No `from __future__ import annotations`: Dagster reads the annotations of context and resources.
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Literal

from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetOut,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    multi_asset,
    multi_asset_check,
)
from pydantic import Field

from resources.firehose import FirehoseDayMissing, FirehoseFile, FirehoseResource, StoredDigest
from resources.lake import LakeResource
from shopdistill_assets.corpus import corpus_parts as parts
from shopdistill_assets.corpus.check_funnel import (
    CHECKS_OF,
    check_metadata,
    day_check_counts,
    disagreements,
    stage_funnel,
)
from shopdistill_assets.corpus.decide import DecideConfig
from shopdistill_assets.corpus.funnel import funnel_metadata
from shopdistill_assets.corpus.gates import GateConfig
from shopdistill_assets.corpus.lines import count_units as count_stream_units
from shopdistill_assets.corpus.parts_pool import default_workers, run_parts
from shopdistill_assets.corpus.structural import StructuralConfig
from shopdistill_assets.ingest.assets import RAW_FIREHOSE, raw_firehose
from shopdistill_assets.partitions import daily_partitions

CODE_VERSION = "corpus-7"  # bump when a per-row rule or the table layout changes
TABLES = parts.TABLES
normalized_traces, agentic_traces, subtask_traces, gated_traces, rejected_traces = (AssetKey(t) for t in TABLES)
_LEDGER_STAGES = ("read", "normalize", "dedupe")  # the stages before the checks: normalized_traces' funnel
# The tables of the check stages, and their stages: check_counts
_CHECKED_TABLES = {"agentic_traces": ("structural",), "gated_traces": ("reasoning_gate", "format_gate")}
_DESCRIPTIONS = {
    "normalized_traces": "One canonical row (OpenAI tool-calls schema) per problem run; re-uploads deduped within the day.",
    "agentic_traces": "Traces where the LLM emitted the tool calls (axis A): identity, scores and the structural "
                      "evidence (the trace text is in normalized_traces and gated_traces).",
    "subtask_traces": "Traces where a harness drove the tools (axis B): kept for later lifting.",
    "gated_traces": "Agentic traces that pass the reasoning-coefficient gate and the format-validity gate.",
    "rejected_traces": "The ledger: every input line that did not reach gated_traces or subtask_traces, "
                       "with stage, reason and detail.",
}


class CorpusConfig(Config):
    workers: int = Field(default_factory=default_workers, description="processes; one firehose file per task")
    subtask_threshold: int = Field(StructuralConfig.subtask_threshold, description="evidence score at which a trace is sub-task")
    no_evidence_label: Literal["agentic", "subtask", "reject"] = Field(
        StructuralConfig.no_evidence_label, description="primary-dialect traces with no proxy log")
    min_reasoning_score: float = Field(GateConfig.min_reasoning_score, description="keep judge score >= this")
    missing_judge_policy: Literal["keep", "reject"] = Field(
        GateConfig.missing_judge_policy, description="dialects that carry no judge score")
    null_reasoning_score_policy: Literal["keep", "reject"] = Field(
        GateConfig.null_reasoning_score_policy, description="judged dialect with a null score")
    max_tokens: int = Field(GateConfig.max_tokens, description="hard limit on the rendered trace")
    tokenizer_path: str | None = Field(None, description="local HF tokenizer for exact counts; default: estimate")

    def decide_config(self) -> DecideConfig:
        return DecideConfig(
            structural=StructuralConfig(subtask_threshold=self.subtask_threshold, no_evidence_label=self.no_evidence_label),
            gates=GateConfig(min_reasoning_score=self.min_reasoning_score, missing_judge_policy=self.missing_judge_policy,
                             null_reasoning_score_policy=self.null_reasoning_score_policy, max_tokens=self.max_tokens,
                             tokenizer_path=self.tokenizer_path))


class FirehoseFileChanged(RuntimeError):
    """A day file's bytes differ from what raw_firehose inventoried."""


# ---- the files of the day: raw_firehose's inventory -----------------------------------------


def day_inventory(firehose: FirehoseResource, lake: LakeResource, day: str) -> tuple[list[tuple[FirehoseFile, str]], list[str]]:
    """([(file, inventoried sha256)] in name order, names listed now but not inventoried)."""
    if not lake.has_day(RAW_FIREHOSE, day):
        raise Failure(description=f"no raw_firehose inventory for day {day} in the lake {lake.root}: "
                                  f"materialize raw_firehose for {day} first", allow_retries=False)
    inventory = sorted(lake.read_day_columns(RAW_FIREHOSE, day, ["file", "sha256"]).to_pylist(), key=lambda r: r["file"])
    try:
        listed = {f.name: f for f in firehose.list_day(day)}
    except FirehoseDayMissing as exc:
        listed, missing_day = {}, str(exc)
    else:
        missing_day = ""
    gone = [r["file"] for r in inventory if r["file"] not in listed]
    if gone:
        names = ", ".join(gone[:5]) + (" …" if len(gone) > 5 else "")
        raise Failure(description=f"day {day}: {len(gone)} file(s) inventoried by raw_firehose are no longer in the "
                                  f"firehose ({names}{'; ' + missing_day if missing_day else ''}): "
                                  f"re-run raw_firehose for {day}", allow_retries=False)
    known = {r["file"] for r in inventory}
    return [(listed[r["file"]], r["sha256"]) for r in inventory], sorted(set(listed) - known)


def _stage_file(day: str, params: dict, file: FirehoseFile, sha256: str, out: Path,
                cfg: DecideConfig) -> parts.StagedFile:
    firehose, digest = FirehoseResource(**params), StoredDigest()
    staged = parts.stage_file(file.name, firehose.day_file_chunks(file, digest), day, cfg, out)
    if digest.complete and digest.hexdigest() != sha256:
        raise FirehoseFileChanged(f"{file.name} changed since raw_firehose inventoried it (sha256 "
                                  f"{digest.hexdigest()[:12]}… now, {sha256[:12]}… inventoried): re-run raw_firehose")
    return staged


def _split_file(staged: parts.StagedFile, superseded, day: str, outs: dict) -> parts.SplitResult:
    try:
        return parts.split_file(staged, superseded, day, outs)
    finally:
        staged.path.unlink(missing_ok=True)  # staged rows are as big as the day: free the disk early


def _firehose_params(firehose: FirehoseResource) -> dict:
    return {k: getattr(firehose, k) for k in FirehoseResource.model_fields}


# ---- the asset -------------------------------------------------------------------------------


@multi_asset(
    name="corpus", partitions_def=daily_partitions, group_name="corpus", deps=[raw_firehose], can_subset=True,
    outs={t: AssetOut(kinds={"python", "parquet"}, description=_DESCRIPTIONS[t], code_version=CODE_VERSION,
                      is_required=False)  # a subset's unselected tables come as materialization events
          for t in TABLES},
    check_specs=[AssetCheckSpec("check_counts", asset=t, blocking=True,
                                description="the named checks' counters agree with the ledger's rows per reason "
                                            "and with the tables' row counts (a mismatch is a bug)")
                 for t in _CHECKED_TABLES],
    description="Normalize, classify and gate every line of the day's inventoried firehose files in one pass.",
)
def corpus(context: AssetExecutionContext, config: CorpusConfig, firehose: FirehoseResource, lake: LakeResource):
    day = context.partition_key
    files, not_inventoried = day_inventory(firehose, lake, day)
    if not_inventoried:
        context.log.warning(f"{day}: {len(not_inventoried)} file(s) not in raw_firehose's inventory are not read "
                            f"(re-run raw_firehose to include them): {not_inventoried[:5]}")
    cfg, params = config.decide_config(), _firehose_params(firehose)
    started = time.monotonic()
    scratch = lake.scratch_dir()
    try:
        tasks = [(day, params, f, sha, scratch / f"staged-{i:05d}.arrow", cfg) for i, (f, sha) in enumerate(files)]
        try:
            staged = run_parts(_stage_file, tasks, config.workers)
        except FirehoseFileChanged as exc:
            raise Failure(description=f"day {day}: {exc}", allow_retries=False) from None
        superseded = parts.superseded_day(staged)
        outs = [{t: scratch / f"{t}-{i:05d}.parquet" for t in TABLES} for i in range(len(files))]
        splits = run_parts(_split_file, [(s, sup, day, o) for s, sup, o in zip(staged, superseded, outs)],
                           config.workers)
        for table in TABLES:
            lake.write_day_parts(table, day, [o[table] for o in outs])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    funnel = _Funnel(staged, splits)
    seconds = max(time.monotonic() - started, 1e-3)
    context.log.info(f"{day}: {funnel.units} lines from {len(files)} files -> {funnel.rows['gated_traces']} gated, "
                     f"{funnel.rows['subtask_traces']} subtask, {funnel.rows['rejected_traces']} rejected "
                     f"in {seconds:.1f} s ({funnel.units / seconds:,.0f} lines/s, {config.workers} workers)")
    common = {"config": MetadataValue.json(config.model_dump()), "code_version": CODE_VERSION}
    extra = {"files": len(files), "files_not_inventoried": len(not_inventoried),
             "files_truncated": sum(s.end is not None and s.end.reason == "truncated_file" for s in staged),
             "files_corrupt": sum(s.corrupt for s in staged)}
    # One pass writes all five tables, whatever was selected (`--select gated_traces` runs the
    # step): the selected ones are its outputs, the others are recorded as materializations too,
    # so Dagster's record of every table matches what the lake holds.
    for table in TABLES:
        metadata = {**funnel.metadata(table), **common, **(extra if table == "normalized_traces" else {})}
        if AssetKey(table) in context.selected_asset_keys:
            yield MaterializeResult(asset_key=table, metadata=metadata)
        else:
            context.log_event(AssetMaterialization(asset_key=table, partition=day, metadata=metadata))
    selected_checks = {key.asset_key for key in context.selected_asset_check_keys if key.name == "check_counts"}
    for table, stages in _CHECKED_TABLES.items():
        wrong = [w for w in funnel.wrong if w.startswith(stages)]
        if wrong:
            context.log.error(f"{day}: the {table} checks' counters disagree with the ledger (a bug): {wrong[:10]}")
        if AssetKey(table) in selected_checks:
            yield AssetCheckResult(asset_key=table, check_name="check_counts", passed=not wrong,
                                   metadata={"disagreements": len(wrong)}, description="; ".join(wrong[:10]) or None)


class _Funnel:
    """In / kept / rejected of each table: the check stages' from the checks' counters (summed
    over the files, superseded copies taken back), the others' from the ledger rows the split
    wrote; `wrong` lists where the two disagree (check_funnel.disagreements)."""

    def __init__(self, staged: list[parts.StagedFile], splits: list[parts.SplitResult]) -> None:
        self.units = sum(s.units for s in staged)
        self.rows: Counter = Counter()
        self.reasons: Counter = Counter()  # ledger rows per (stage, reason)
        for split in splits:
            self.rows.update(split.outputs)
            self.reasons.update(split.reasons)
        self.checks = day_check_counts((s.checks for s in staged), (split.superseded for split in splits))
        self.stages = {stage: stage_funnel(self.checks, stage) for stage in CHECKS_OF}
        self.wrong = disagreements(self.checks, self.reasons, self.rows)

    def ledger(self, stages: tuple[str, ...] | None = None) -> Counter:
        """Ledger rows per (stage, reason), of `stages` or all."""
        return Counter({key: n for key, n in self.reasons.items() if stages is None or key[0] in stages})

    def checked(self, *stages: str) -> Counter:
        """Traces the checks of `stages` stopped, per (stage, reason), from their counters."""
        return Counter({(stage, reason): n for stage in stages for reason, n in self.stages[stage].failed.items()})

    def metadata(self, table: str) -> dict:
        """The funnel of `table`; `dagster/row_count` is always the rows written to that table
        (the ledger's funnel counts the lines kept elsewhere as its `kept`, not as its rows)."""
        return {**self._funnel(table), "dagster/row_count": self.rows[table]}

    def _funnel(self, table: str) -> dict:
        r = self.rows
        if table == "normalized_traces":
            return funnel_metadata(self.units, r[table], self.ledger(_LEDGER_STAGES),
                                   superseded=sum(self.ledger(("dedupe",)).values()))
        if table == "agentic_traces":
            structural = self.stages["structural"]
            n_in = structural.entered
            return funnel_metadata(n_in, r[table], self.checked("structural"), subtask=r["subtask_traces"],
                                   agentic_share=round(r[table] / n_in, 4) if n_in else 0.0,
                                   **check_metadata(structural))
        if table == "subtask_traces":
            return funnel_metadata(r["normalized_traces"], r[table], {})
        if table == "gated_traces":
            reasoning, fmt = self.stages["reasoning_gate"], self.stages["format_gate"]
            return funnel_metadata(reasoning.entered, fmt.passed, self.checked("reasoning_gate", "format_gate"),
                                   **check_metadata(reasoning), **check_metadata(fmt))
        by_stage = Counter()
        for (stage, _), n in self.reasons.items():
            by_stage[stage] += n
        return funnel_metadata(self.units, r["gated_traces"] + r["subtask_traces"], self.ledger(),
                               **{f"stage/{k}": v for k, v in sorted(by_stage.items())})


# ---- conservation ------------------------------------------------------------------------------


def _count_file_units(params: dict, file: FirehoseFile, sha256: str) -> int:
    firehose, digest = FirehoseResource(**params), StoredDigest()
    units = count_stream_units(firehose.day_file_chunks(file, digest))
    if digest.complete and digest.hexdigest() != sha256:
        raise FirehoseFileChanged(f"{file.name} changed since raw_firehose inventoried it: re-run raw_firehose")
    return units


def count_units(firehose: FirehoseResource, lake: LakeResource, day: str, workers: int = 1) -> int:
    """Units of the day's inventoried files, counted afresh: lines, plus one for a file that did
    not end cleanly (corpus/lines.py)."""
    files, _ = day_inventory(firehose, lake, day)
    params = _firehose_params(firehose)
    return sum(run_parts(_count_file_units, [(params, f, sha) for f, sha in files], workers))


@multi_asset_check(
    specs=[AssetCheckSpec("conservation", asset=t, blocking=True,
                          description="lines read == gated_traces + subtask_traces + rejected_traces, "
                                      "and every (source_file, source_line) lands exactly once") for t in TABLES],
    can_subset=True,  # one table's check alone, when one table of the corpus step is selected
    description="Conservation over the day's tables, recounting the inventoried firehose files independently.",
)
def conservation(context, firehose: FirehoseResource, lake: LakeResource):
    import duckdb

    day = context.partition_key if context.has_partition_key else None
    if day is None:
        for table in TABLES:
            yield AssetCheckResult(asset_key=table, check_name="conservation", passed=False,
                                   description="run this check for one day partition")
        return
    try:
        units = count_units(firehose, lake, day, default_workers())
        changed = ""
    except FirehoseFileChanged as exc:
        units, changed = -1, str(exc)
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
    description = None if passed else changed or f"{units} lines read but {total} rows accounted ({total - distinct} duplicates)"
    metadata = {"lines_read": units, "accounted": total, "duplicates": total - distinct, **counts}
    for table in TABLES:
        if AssetKey(table) not in {key.asset_key for key in context.selected_asset_check_keys}:
            continue
        yield AssetCheckResult(asset_key=table, check_name="conservation", passed=passed, metadata=metadata,
                               description=description)


CORPUS_ASSETS = [corpus]
CORPUS_CHECKS = [conservation]
__all__ = ["CORPUS_ASSETS", "CORPUS_CHECKS", "CODE_VERSION", "CorpusConfig", "FirehoseFileChanged", "TABLES",
           "agentic_traces", "conservation", "corpus", "count_units", "day_inventory", "gated_traces",
           "normalized_traces", "rejected_traces", "subtask_traces"]
