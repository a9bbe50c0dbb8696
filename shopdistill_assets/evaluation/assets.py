"""Held-out evaluation as an asset, one dynamic partition per policy.

    heldout_eval_set ─► policy_eval[policy]   ASR, pass@1, pass@k, per category; rollouts kept
                                              in the canonical trace schema, for inspection only:
                                              held-out rollouts are never training data (the
                                              training inputs' `train_side_only` check enforces it)

Scripted baselines and checkpoints are served in-process by the local OpenAI-compatible server
and evaluated through it over HTTP, exactly like an external endpoint (vLLM in production).
"""

# No `from __future__ import annotations`: Dagster reads the annotations of context and resources.
import hashlib
import json
import time
from contextlib import contextmanager
from pathlib import Path

import polars as pl
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    Config,
    MaterializeResult,
    MetadataValue,
    asset,
    asset_check,
)
from pydantic import Field

from resources.lake import LakeResource
from shopdistill_assets.agent.judge import build_judge
from shopdistill_assets.agent.metrics import metrics_table, plot_asr
from shopdistill_assets.agent.policies_registry import PolicySpec, lookup, policy_partitions
from shopdistill_assets.agent.rollout import RolloutConfig, evaluate
from shopdistill_assets.instance import project_home
from shopdistill_assets.sandbox import load_catalog
from shopdistill_assets.split.assets import heldout_eval_set
from shopdistill_assets.split.heldout import HELDOUT_ASSET, newest_heldout_version, rows_to_problems

EVAL_ASSET = "policy_eval"


class EvalConfig(Config):
    samples: int = Field(8, description="samples per problem (pass@k up to this k)")
    max_steps: int = Field(25, description="steps per episode")
    concurrency: int = Field(8, description="episodes in flight")
    request_timeout_s: float = Field(120.0, description="deadline per model call: the whole reply")
    episode_time_limit_s: float = Field(300.0, description="deadline per episode: all its calls and tools")
    tool_timeout_s: float = Field(10.0, description="deadline per sandbox tool call")
    catalog: str | None = Field(None, description="catalog folder (default HOME/arena/catalog)")
    heldout_version: str | None = Field(None, description="heldout_eval_set snapshot (default: the newest)")
    limit: int | None = Field(None, description="evaluate only the first N problems")
    max_new_tokens: int = Field(512, description="checkpoints: tokens per model turn")
    batch_size: int = Field(1, description="checkpoints: concurrent turns decoded together (1: one at a time)")
    judge_endpoint: str | None = Field(None, description="OpenAI-compatible reasoning judge (none: episodes unjudged)")
    judge_model: str = Field("judge", description="judge model names, comma-separated, tried in turn")
    reuse_same_weights: bool = Field(True, description="a checkpoint whose weights another policy's evaluation "
                                     "already ran with these settings (a stage that passed its parent on) takes "
                                     "that evaluation's episodes instead of running them again")


# Settings that leave an episode's outcome alone: concurrency and batch_size change how fast it
# comes, reuse_same_weights whether it is run; every other EvalConfig field is in the key.
_THROUGHPUT_ONLY = ("concurrency", "batch_size", "reuse_same_weights")


def weights_sha256(spec: PolicySpec) -> str | None:
    """The content hash of a local checkpoint's weights (None for endpoints and scripted policies)."""
    if not spec.checkpoint or not Path(spec.checkpoint).is_dir():
        return None
    from resources.checkpoint_store import content_sha256

    return content_sha256(Path(spec.checkpoint))


def evaluation_key(config: EvalConfig, weights: str, version: str, problem_ids: list[str]) -> str:
    """One evaluation's identity: the weights, the held-out snapshot and problems, every setting
    that changes an episode."""
    settings = {k: v for k, v in config.model_dump().items() if k not in _THROUGHPUT_ONLY}
    text = json.dumps({"weights": weights, "heldout_version": version, "problems": problem_ids,
                       "settings": settings}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def same_evaluation(lake: LakeResource, key: str, policy: str, version: str) -> str | None:
    """Another policy's snapshot with this evaluation key, the newest; None if there is none. Only
    the snapshots of this held-out version (`<policy>__<version>`) are read: one manifest each."""
    found = []
    for snapshot in lake.list_snapshots(EVAL_ASSET):
        if not snapshot.endswith(f"__{version}") or snapshot == f"{policy}__{version}":
            continue
        manifest = lake.read_manifest(EVAL_ASSET, snapshot)
        if manifest.get("evaluation_key") == key and not manifest.get("reused_from"):
            found.append((manifest.get("evaluated_at", ""), snapshot))
    return max(found)[1] if found else None


@contextmanager
def policy_endpoint(spec: PolicySpec, problems, catalog, max_new_tokens: int = 512, batch_size: int = 1):
    """(base URL, model name) for a policy; local policies are served for the duration."""
    if spec.endpoint:
        yield spec.endpoint, spec.model or spec.name
        return
    from shopdistill_assets.agent.server import serve

    if spec.scripted == "oracle":
        from shopdistill_assets.agent.policies import OraclePolicy

        policy = OraclePolicy(problems, catalog)
    elif spec.scripted == "random":
        from shopdistill_assets.agent.policies import RandomPolicy

        policy = RandomPolicy(seed=0)
    elif spec.scripted == "fair":
        from shopdistill_assets.agent.policies import FairPolicy

        policy = FairPolicy()
    else:
        from shopdistill_assets.agent.hf_policy import checkpoint_policy

        policy = checkpoint_policy(spec.checkpoint, max_new_tokens=max_new_tokens, batch_size=batch_size)
    with serve(policy, model_name=spec.name) as server:
        yield server.url, spec.name


def heldout_version(lake: LakeResource, requested: str | None = None) -> str:
    """The heldout_eval_set snapshot to evaluate on: `requested`, or the newest by its as-of day."""
    if requested:
        return requested
    newest = newest_heldout_version(lake.list_snapshots(HELDOUT_ASSET),
                                    lambda v: lake.read_manifest(HELDOUT_ASSET, v).get("as_of_day", ""))
    if newest is None:
        raise ValueError("no heldout_eval_set snapshot in the lake: materialize it first")
    return newest


@asset(partitions_def=policy_partitions, group_name="evaluation", deps=[heldout_eval_set], kinds={"python", "parquet"},
       description="A policy on the leak-guarded held-out set in the sandbox: ASR, pass@1, pass@k, per category.")
def policy_eval(context: AssetExecutionContext, config: EvalConfig, lake: LakeResource) -> MaterializeResult:
    spec = lookup(context.partition_key)
    version = heldout_version(lake, config.heldout_version)
    problems = rows_to_problems(lake.read_snapshot(HELDOUT_ASSET, version).to_dicts())[: config.limit]
    if not problems:
        raise ValueError(f"heldout_eval_set {version} is empty: nothing to evaluate")
    problem_ids = sorted({p.problem_id for p in problems})
    weights = weights_sha256(spec)
    key = evaluation_key(config, weights, version, problem_ids) if weights else None
    reused = same_evaluation(lake, key, spec.name, version) if key and config.reuse_same_weights else None
    if reused:
        return _reuse(context, lake, spec, reused, version, key, weights, len(problems))
    catalog = load_catalog(Path(config.catalog) if config.catalog else project_home() / "arena" / "catalog")
    cfg = RolloutConfig(samples=config.samples, max_steps=config.max_steps, concurrency=config.concurrency,
                        request_timeout_s=config.request_timeout_s, episode_time_limit_s=config.episode_time_limit_s,
                        tool_timeout_s=config.tool_timeout_s)
    started = time.monotonic()
    with policy_endpoint(spec, problems, catalog, config.max_new_tokens, config.batch_size) as (url, model):
        result = evaluate(url, model, problems, catalog, cfg, judge=build_judge(config.judge_endpoint, config.judge_model))
    summary = result.summary()
    seconds = max(time.monotonic() - started, 1e-3)
    episodes = summary.get("episodes") or len(problems) * cfg.samples
    context.log.info(f"{spec.name}: {episodes} episodes in {seconds:.1f} s ({episodes / seconds:.2f} episodes/s)")
    rows = pl.DataFrame([{**ep.to_canonical_row(result.eval_run_id, i + 1), "success": ep.success,
                          "failure_reason": ep.failure_reason, "sample": ep.sample}
                         for i, ep in enumerate(result.episodes)], infer_schema_length=None)
    snapshot = f"{spec.name}__{version}"
    manifest = {"policy": json.loads(json.dumps(spec.__dict__)), "heldout_version": version, "summary": summary,
                "problem_ids": problem_ids, "evaluation_key": key, "weights_sha256": weights,
                "evaluated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    folder = lake.write_snapshot(EVAL_ASSET, snapshot, rows, manifest)
    return MaterializeResult(metadata=_metadata(spec, summary, version, len(problems), len(result.episodes), folder))


def _reuse(context, lake: LakeResource, spec: PolicySpec, reused: str, version: str, key: str, weights: str,
           problems: int) -> MaterializeResult:
    """This policy's snapshot made of another's evaluation of the same weights (episodes as they ran)."""
    source = lake.read_manifest(EVAL_ASSET, reused)
    rows = lake.read_snapshot(EVAL_ASSET, reused)
    context.log.info(f"{spec.name}: weights {weights[:16]} were evaluated with these settings as {reused}; "
                     f"its {rows.height} episodes are reused (reuse_same_weights=False runs them again)")
    manifest = {**source, "policy": json.loads(json.dumps(spec.__dict__)), "reused_from": reused,
                "evaluation_key": key, "weights_sha256": weights}
    folder = lake.write_snapshot(EVAL_ASSET, f"{spec.name}__{version}", rows, manifest)
    meta = _metadata(spec, source["summary"], version, problems, rows.height, folder)
    return MaterializeResult(metadata={**meta, "reused_from": reused})


def _metadata(spec: PolicySpec, summary: dict, version: str, problems: int, episodes: int, folder: str) -> dict:
    plot = plot_asr({spec.name: summary}, project_home() / "eval" / f"{spec.name}.png")
    return {
        "asr": summary["asr"], "pass_at_1": summary["pass_at_1"],
        **{f"pass_at_{k}": v for k, v in summary["pass_at_k"].items()},
        **{f"asr/{cat}": v.get("asr") for cat, v in summary["by_category"].items() if isinstance(v, dict)},
        "problems": problems, "episodes": episodes, "heldout_version": version,
        **{k: v for k, v in (("format_valid_rate", summary["format_valid_rate"]), ("reasoning_q", summary["reasoning_q"]),
                             ("final_score", summary["final_score"]),
                             ("search_words_from_request", summary["search_grounding"]["word_share"])) if v is not None},
        "table": MetadataValue.md(metrics_table({spec.name: summary})),
        "errors": MetadataValue.json(summary["errors"]), "plot": MetadataValue.path(str(plot)),
        "rollouts": MetadataValue.path(folder),
    }


@asset_check(asset=policy_eval,
             description="Stale: some evaluated problems have since moved out of the held-out side (leak merge).")
def not_stale(context, lake: LakeResource) -> AssetCheckResult:
    name = context.partition_key if context.has_partition_key else None
    snapshots = [s for s in lake.list_snapshots(EVAL_ASSET) if name is None or s.startswith(f"{name}__")]
    days = lake.list_days("leak_clusters")
    if not snapshots or not days:
        return AssetCheckResult(passed=True, severity=AssetCheckSeverity.WARN, metadata={"checked": 0})
    # Both sides speak core.identity.problem_key: leak_clusters files problems under it and the
    # held-out snapshot (hence the manifest) carries it. A key leak_clusters no longer knows is
    # stale too: an evaluation whose problems cannot be checked is not silently fresh.
    sides = dict(lake.read_day("leak_clusters", days[-1]).select("problem_id", "side").iter_rows())
    stale = {}
    for snapshot in snapshots:
        keys = lake.read_manifest(EVAL_ASSET, snapshot)["problem_ids"]
        moved = {p: sides.get(p, "unknown") for p in keys if sides.get(p) != "heldout"}
        if moved:
            stale[snapshot] = moved
    return AssetCheckResult(passed=not stale, severity=AssetCheckSeverity.WARN, metadata={
        "checked": len(snapshots), "stale_evaluations": len(stale), "leak_clusters_day": days[-1],
        "moved_problems": MetadataValue.json(stale)})


EVAL_ASSETS = [policy_eval]
EVAL_CHECKS = [not_stale]
