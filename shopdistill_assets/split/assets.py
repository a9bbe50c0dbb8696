"""Leak clusters and the guarded split, as assets.

    normalized_traces[day] ─► leak_clusters[day] ◄─ leak_clusters[day-1]
    gated_traces[day] + leak_clusters[day] ─► split_traces[day]
    split_traces (train side, a window of days) ─► train_corpus       (versioned snapshot)
    leak_clusters (latest day) + suites        ─► heldout_eval_set   (versioned snapshot)
"""

# No `from __future__ import annotations`: Dagster reads the annotations of context and resources.
import hashlib
import json
import shutil
import warnings
from datetime import date, timedelta
from typing import Literal

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetDep,
    AssetExecutionContext,
    BackfillPolicy,
    Config,
    DataVersion,
    MaterializeResult,
    MetadataValue,
    TimeWindowPartitionMapping,
    asset,
    asset_check,
)
from pydantic import Field

from resources.lake import LakeResource
from shopdistill_assets import settings
from shopdistill_assets.core.canonical import canonical_version
from shopdistill_assets.core.identity import problem_keys
from shopdistill_assets.corpus.assets import gated_traces, normalized_traces
from shopdistill_assets.corpus.corpus_parts import FINAL_OPTIONS
from shopdistill_assets.corpus.messages import with_structured_messages
from shopdistill_assets.instance import project_home
from shopdistill_assets.partitions import daily_partitions
from shopdistill_assets.split.decontaminate import PublicTestSet
from shopdistill_assets.split.heldout import HELDOUT_COLUMNS, GroundTruth, heldout_row
from shopdistill_assets.split.leak_clusters import LeakConfig
from shopdistill_assets.split.leak_replay import LeakState, build_state, day_problems
from shopdistill_assets.split.snapshots import file_sha256, latest_per_trace, sample_mask

STATE_TABLE = "leak_state"



class LeakStageConfig(Config):
    heldout_share: float = Field(LeakConfig.heldout_share, description="share of new clusters held out")
    salt: str = Field(LeakConfig.salt, description="salt of the held-out draw")
    verify_threshold: float = Field(LeakConfig.verify_threshold, description="exact Jaccard needed to link")
    decontaminate: list[str] = Field(default_factory=lambda: settings.path_list(settings.DECONTAMINATE),
                                     description="public test sets (files or folders): matches become side=excluded")

    def leak_config(self) -> LeakConfig:
        return LeakConfig(heldout_share=self.heldout_share, salt=self.salt, verify_threshold=self.verify_threshold)


def _day_problem_rows(lake: LakeResource, day: str) -> list[dict]:
    if not lake.has_day("normalized_traces", day):
        return []
    return lake.read_day_columns("normalized_traces", day, ["problem_id", "query", "category"]).to_pylist()


with warnings.catch_warnings():  # the flag is beta; a first day has no previous partition
    warnings.simplefilter("ignore")
    _PREVIOUS_DAY = TimeWindowPartitionMapping(start_offset=-1, end_offset=-1, allow_nonexistent_upstream_partitions=True)


def _leak_day(day: str, config: LeakStageConfig, lake: LakeResource) -> dict:
    """One day of the chain: build on the previous day's state (or replay), write the day's three
    tables, return its metadata."""
    cfg = config.leak_config()
    public = PublicTestSet.from_paths(config.decontaminate, cfg) if config.decontaminate else None
    earlier = [d for d in lake.list_days("normalized_traces") if d < day]
    previous_day = (date.fromisoformat(day) - timedelta(days=1)).isoformat()
    previous = None
    if lake.has_day(STATE_TABLE, previous_day):
        blob = lake.read_day_columns(STATE_TABLE, previous_day, ["state"]).column("state")[0].as_py()
        previous = LeakState.from_bytes(blob)
    index, update, state, replayed = build_state(
        day, earlier, lambda d: day_problems(_day_problem_rows(lake, d)), previous, cfg, public)
    rows = index.assignments()
    frame = pl.DataFrame(rows, schema={"problem_id": pl.String, "query": pl.String, "leak_cluster_id": pl.String,
                                       "side": pl.String, "first_day": pl.String}).with_columns(
        canonicalizer=pl.lit(canonical_version(cfg.canon)))
    lake.write_day("leak_clusters", day, frame)
    lake.write_day(STATE_TABLE, day, pa.table({"state": pa.array([state.to_bytes()], pa.large_binary())}))
    merges = pl.DataFrame([{**e, "absorbed": json.dumps(e["absorbed"]), "sides_before": json.dumps(e["sides_before"]),
                            "moved_heldout_to_train": json.dumps(e["moved_heldout_to_train"]),
                            "moved_to_excluded": json.dumps(e["moved_to_excluded"])} for e in index.merge_log],
                          schema={"day": pl.String, "kind": pl.String, "leak_cluster_id": pl.String, "absorbed": pl.String,
                                  "sides_before": pl.String, "side_after": pl.String,
                                  "moved_heldout_to_train": pl.String, "moved_to_excluded": pl.String})
    lake.write_day("leak_merge_log", day, merges)
    sides = frame.group_by("side").len().sort("side").to_dicts()
    clusters = frame.group_by("leak_cluster_id").len()
    largest = int(clusters["len"].max()) if clusters.height else 0
    moved_today = sum(len(e["moved_heldout_to_train"]) for e in update.merge_events)
    return {
        "dagster/row_count": frame.height, "problems_today": len(update.assignments), "clusters": clusters.height,
        "largest_cluster": largest, **{f"side/{s['side']}": s["len"] for s in sides},
        "merges_today": len(update.merge_events), "moved_heldout_to_train_today": moved_today,
        "replayed_from_first_day": replayed, "canonicalizer": canonical_version(cfg.canon),
        "decontaminate": MetadataValue.json({"sets": config.decontaminate, **(public.counts() if public else {})}),
    }


@asset(
    partitions_def=daily_partitions, group_name="split", kinds={"python", "parquet"},
    deps=[normalized_traces, AssetDep("leak_clusters", partition_mapping=_PREVIOUS_DAY)],
    # A backfill replays its days in one run, in order, each building on the state the day before
    # it wrote (no daemon tick between days); the metadata stays per day.
    backfill_policy=BackfillPolicy.single_run(),
    description="Every problem seen on days <= this day with its leak cluster and side (train | heldout | excluded).",
)
def leak_clusters(context: AssetExecutionContext, config: LeakStageConfig, lake: LakeResource) -> MaterializeResult:
    for day in sorted(context.partition_keys):
        context.add_asset_metadata(_leak_day(day, config, lake), partition_key=day)
    return MaterializeResult()


@asset_check(asset=leak_clusters, blocking=True, description="No leak cluster has members on two sides.")
def one_side_per_cluster(context, lake: LakeResource) -> AssetCheckResult:
    split = {}
    for day in context.partition_keys:  # every day of the run (a backfill replays several)
        frame = lake.read_day("leak_clusters", day)
        split[day] = frame.group_by("leak_cluster_id").agg(pl.col("side").n_unique().alias("sides")).filter(
            pl.col("sides") > 1).height
    return AssetCheckResult(passed=not any(split.values()), metadata={
        "clusters_on_two_sides": sum(split.values()), "days_failing": MetadataValue.json([d for d, n in split.items() if n])})


@asset_check(asset=leak_clusters, description="Warn when one cluster holds too large a share of the problems "
                                               "(over-merging: the split stops meaning anything).")
def largest_cluster_share(context, lake: LakeResource) -> AssetCheckResult:
    frame = lake.read_day("leak_clusters", max(context.partition_keys))  # the newest day holds every problem
    largest = frame.group_by("leak_cluster_id").len()["len"].max() if frame.height else 0
    share = (largest or 0) / frame.height if frame.height else 0.0
    return AssetCheckResult(passed=share <= 0.02 or frame.height < 200, severity=AssetCheckSeverity.WARN,
                            metadata={"largest_cluster": int(largest or 0), "share": round(share, 4)})


@asset(partitions_def=daily_partitions, group_name="split", deps=[gated_traces, leak_clusters],
       kinds={"python", "parquet"}, description="Gated traces with their leak_cluster_id and side.")
def split_traces(context: AssetExecutionContext, lake: LakeResource) -> MaterializeResult:
    day = context.partition_key
    sides = lake.read_day("leak_clusters", day).select("problem_id", "leak_cluster_id", "side")
    outputs = []
    scratch = lake.scratch_dir()
    counts: dict[str, int] = {}
    try:
        for i, part in enumerate(lake.day_part_files("gated_traces", day, scratch)):
            frame = pl.read_parquet(part)
            keys = problem_keys(frame["problem_id"].to_list(), frame["query"].to_list())
            frame = frame.with_columns(pl.Series("problem_key", keys, dtype=pl.String)).join(
                sides.rename({"problem_id": "problem_key"}), on="problem_key", how="left").with_columns(
                pl.col("side").fill_null("unassigned")).drop("problem_key")
            for side, n in frame.group_by("side").len().iter_rows():
                counts[side] = counts.get(side, 0) + n
            out = scratch / f"split-{i:05d}.parquet"
            pq.write_table(frame.to_arrow(), out, **FINAL_OPTIONS)
            outputs.append(out)
        lake.write_day_parts("split_traces", day, outputs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return MaterializeResult(metadata={"dagster/row_count": sum(counts.values()),
                                       **{f"side/{k}": v for k, v in sorted(counts.items())}})


class TrainCorpusConfig(Config):
    end_day: str | None = Field(None, description="last day of the window (default: the latest split day)")
    window_days: int = Field(30, description="days in the window, ending at end_day")
    sample_fraction: float = Field(1.0, description="deterministic sample of traces (hash of trace_id)")
    seed: int = Field(0, description="sampling seed")
    source: Literal["split_traces", "normalized_traces"] = Field(
        "split_traces", description="split_traces (structural filter and gates passed: the corpus); normalized_traces: "
                                    "every normalized trace of the train side, unfiltered (an ablation baseline)")


@asset(group_name="split", deps=[split_traces], kinds={"python", "parquet"},
       description="Versioned train snapshot: train-side traces of a window of days, one row per trace_id "
                   "(latest upload wins); `messages` as conversational structs, so "
                   "datasets.load_dataset('parquet', ...) feeds SFTTrainer directly.")
def train_corpus(context: AssetExecutionContext, config: TrainCorpusConfig, lake: LakeResource) -> MaterializeResult:
    days = lake.list_days(config.source)
    end = config.end_day or (days[-1] if days else None)
    if end is None:
        raise ValueError(f"no {config.source} days in the lake: run the corpus and split assets first")
    start = (date.fromisoformat(end) - timedelta(days=config.window_days - 1)).isoformat()
    window = [d for d in days if start <= d <= end]
    keys = pl.concat([pl.from_arrow(lake.read_day_columns(config.source, d, [
        "trace_id", "updated_at", "day", "source_file", "source_line", "problem_id", "query"])) for d in window])
    winners = latest_per_trace(keys)  # across days, before the side filter: a trace's latest copy decides
    # Sides as of the window's last day, not as of each trace's day: a cluster excluded or merged
    # later must not keep its older traces in (or out of) the train side.
    current = lake.read_day("leak_clusters", end).select(
        pl.col("problem_id").alias("problem_key"), pl.col("leak_cluster_id").alias("current_cluster"),
        pl.col("side").alias("current_side"))
    winners = winners.with_columns(pl.Series("problem_key", problem_keys(
        winners["problem_id"].to_list(), winners["query"].to_list()), dtype=pl.String)).join(
        current, on="problem_key", how="left")
    winners = winners.filter(pl.col("current_side") == "train")
    winners = winners.filter(sample_mask(winners["trace_id"], config.sample_fraction, config.seed))
    scratch = lake.scratch_dir()
    try:
        out = scratch / "part-00000.parquet"
        writer = None
        keep = winners.select("day", "source_file", "source_line", "current_cluster", "current_side")
        for d in window:
            for part in lake.day_part_files(config.source, d, scratch):
                frame = pl.read_parquet(part).join(keep, on=["day", "source_file", "source_line"], how="inner")
                frame = frame.with_columns(leak_cluster_id=pl.col("current_cluster"), side=pl.col("current_side")).drop(
                    "current_cluster", "current_side").sort("trace_id")
                # Conversational rows: SFTTrainer reads `messages` as it is (tools stay JSON text).
                table = with_structured_messages(frame.to_arrow())
                if writer is None:
                    writer = pq.ParquetWriter(out, table.schema, **FINAL_OPTIONS)
                writer.write_table(table.cast(writer.schema))
        if writer is None:
            raise ValueError(f"no train-side traces in days {window}")
        writer.close()
        content_hash = file_sha256(out)
        version = f"v{end.replace('-', '')}-{content_hash[:12]}"
        inventory = {d: lake.read_day("raw_firehose", d).select("file", "sha256").sort("file").to_dicts()
                     for d in window if lake.has_day("raw_firehose", d)}
        manifest = {"asset": "train_corpus", "version": version, "content_sha256": content_hash,
                    "days": window, "firehose_files": inventory, "rows": winners.height,
                    "window_days": config.window_days, "sample_fraction": config.sample_fraction, "seed": config.seed,
                    "canonicalizer": canonical_version(LeakConfig().canon), "leak_clusters_day": end,
                    "source": f"{config.source}, side=train as of leak_clusters of the last day"}
        folder = lake.write_snapshot_file("train_corpus", version, out, manifest)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return MaterializeResult(data_version=DataVersion(content_hash), metadata={
        "dagster/row_count": winners.height, "version": version, "days": len(window), "first_day": window[0],
        "last_day": window[-1], "path": MetadataValue.path(folder), "content_sha256": content_hash})


class HeldoutConfig(Config):
    as_of_day: str | None = Field(None, description="leak_clusters day to read (default: the latest)")
    suites: list[str] = Field(default_factory=lambda: settings.path_list(settings.SUITES),
                              description="suite files or folders with ground truth (default: HOME/arena/suites)")


@asset(group_name="split", deps=[leak_clusters], kinds={"python", "parquet"},
       description="Held-out problems with ground truth, one per leak cluster: what checkpoints are scored on.")
def heldout_eval_set(context: AssetExecutionContext, config: HeldoutConfig, lake: LakeResource) -> MaterializeResult:
    from shopdistill_assets.split.heldout import load_problems

    days = lake.list_days("leak_clusters")
    day = config.as_of_day or (days[-1] if days else None)
    if day is None:
        raise ValueError("no leak_clusters days in the lake: run the split assets first")
    leak = lake.read_day("leak_clusters", day)
    suite_paths = config.suites or [str(project_home() / "arena" / "suites")]
    truth = [p for path in suite_paths for p in load_problems(path)]
    ground_truth = GroundTruth(truth)
    chosen, missing = [], 0
    heldout = leak.filter(pl.col("side") == "heldout").sort(["leak_cluster_id", "first_day", "problem_id"])
    for cluster in heldout.partition_by("leak_cluster_id", maintain_order=True):
        # the first problem of the cluster with ground truth, found by its id or by its text
        match, leak_problem = next(((m, r["problem_id"]) for r in cluster.iter_rows(named=True)
                                    if (m := ground_truth.find(r["problem_id"], r["query"]))), (None, None))
        if match is None:
            missing += 1
            continue
        chosen.append(heldout_row(match, leak_problem, cluster["leak_cluster_id"][0]))
    frame = pl.DataFrame(chosen, schema=dict.fromkeys(HELDOUT_COLUMNS, pl.String))
    content_hash = hashlib.sha256(frame.write_ndjson().encode()).hexdigest()
    version = f"v{day.replace('-', '')}-{content_hash[:12]}"
    by_category = {c: n for c, n in frame.group_by("category").len().sort("category").iter_rows()}
    manifest = {"asset": "heldout_eval_set", "version": version, "as_of_day": day, "problems": frame.height,
                "clusters_without_ground_truth": missing, "by_category": by_category, "suites": suite_paths,
                "content_sha256": content_hash}
    folder = lake.write_snapshot("heldout_eval_set", version, frame, manifest)
    return MaterializeResult(data_version=DataVersion(content_hash), metadata={
        "dagster/row_count": frame.height, "version": version, "as_of_day": day, "path": MetadataValue.path(folder),
        "clusters_without_ground_truth": missing, **{f"category/{c}": n for c, n in by_category.items()}})


SPLIT_ASSETS = [leak_clusters, split_traces, train_corpus, heldout_eval_set]
SPLIT_CHECKS = [one_side_per_cluster, largest_cluster_share]
