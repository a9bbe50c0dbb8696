"""The five training stages as assets, each a DeepSpeed job launched through Dagster Pipes.

    base model ─► sft_checkpoint ─► resft_checkpoint ─► teacher_sft_checkpoint ─► kto_checkpoint ─► dr_grpo_checkpoint
                  (train_corpus)    (resft_dataset)     (teacher_sft_dataset)     (kto_dataset)     (grpo_dataset)

A stage starts from the newest checkpoint of the stage before it (a clear failure when there is
none), trains on the snapshot its dataset asset last materialized, and publishes
`checkpoints/<stage>/<content version>/` with `lineage.json` and a model card. Its data version
is the checkpoint's content hash, so Dagster marks it stale when its corpus or parent changes.
A stage with nothing to learn (no rows) says so and passes its parent's weights on unchanged,
recorded as `trained: false`, so the chain goes on. Each checkpoint is registered as a policy
named after its stage, for `policy_eval`; `training_report` tabulates them.
"""

# No `from __future__ import annotations`: Dagster reads the annotations of context and resources.
import json
from pathlib import Path
from typing import Any

from dagster import (
    AssetExecutionContext,
    Config,
    DataVersion,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)
from pydantic import Field

from resources.checkpoints import CheckpointStoreResource
from resources.lake import LakeResource
from resources.launcher import TrainingLauncher, deepspeed_config
from shopdistill_assets.core.checkpoint_store import CheckpointNotFound, CheckpointStore, content_sha256
from shopdistill_assets.core.lineage import build_lineage, merge_files, model_card, snapshot_ref
from shopdistill_assets.instance import project_home
from shopdistill_assets.train import STAGES, Stage
from shopdistill_assets.training_data import latest_snapshot

GROUP = "training"
CODE_VERSION = "train-v1"


class StageTrainConfig(Config):
    """Hyperparameters of one stage run (anything left None takes the method's default)."""

    max_steps: int = Field(-1, description="optimizer steps; -1: num_train_epochs over the dataset")
    num_train_epochs: float = Field(1.0, description="epochs when max_steps is -1")
    learning_rate: float | None = Field(None, description="default: the method's (sft 5e-5, kto 5e-7, dr_grpo 1e-6)")
    per_device_train_batch_size: int | None = Field(None, description="micro-batch per device")
    gradient_accumulation_steps: int | None = Field(None, description="micro-batches per step")
    max_length: int | None = Field(None, description="tokens per sequence (sft, kto)")
    seed: int = Field(0, description="training seed")
    beta: float | None = Field(None, description="kto: beta (default 0.02, the ORO paper's); dr_grpo: KL weight (default 0)")
    num_generations: int | None = Field(None, description="dr_grpo: completions per prompt")
    max_completion_length: int | None = Field(None, description="dr_grpo: tokens per completion")
    episode_reward: bool = Field(False, description="dr_grpo: add the episode outcome from the sandbox (TRL environment)")
    only_successful: bool = Field(False, description="sft stages: train only on rows whose trajectory scored 1 "
                                                     "(the outcome filter; recorded in lineage as method)")
    deepspeed: str | None = Field(None, description="zero2 | zero3 | a JSON file (default: the launcher's)")
    trainer_json: str = Field("{}", description="more TRL config kwargs, as a JSON object")

    def trainer_kwargs(self, method: str) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"max_steps": self.max_steps, "num_train_epochs": self.num_train_epochs,
                                  "seed": self.seed}
        for key in ("learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "beta"):
            if getattr(self, key) is not None:
                kwargs[key] = getattr(self, key)
        if self.max_length is not None and method in ("sft", "kto"):
            kwargs["max_length"] = self.max_length
        if method == "dr_grpo":
            for key in ("num_generations", "max_completion_length"):
                if getattr(self, key) is not None:
                    kwargs[key] = getattr(self, key)
        extra = json.loads(self.trainer_json or "{}")
        if not isinstance(extra, dict):
            raise Failure(description="trainer_json must be a JSON object", allow_retries=False)
        return {**kwargs, **extra}


def _parent(stage: Stage, store: CheckpointStore, checkpoints: CheckpointStoreResource) -> tuple[dict, str, dict]:
    """(parent entry for lineage, local model path, parent lineage or {}) for a stage."""
    if stage.parent is None:
        path = checkpoints.base_model_path(project_home() / "models")
        local = Path(path)
        sha = content_sha256(local) if local.is_dir() else None
        return {"base_model": checkpoints.base_model, "path": path, "sha256": sha}, path, {}
    try:
        ref = store.latest(stage.parent)
    except CheckpointNotFound as exc:
        raise Failure(description=f"{stage.name} starts from the newest {stage.parent} checkpoint, and there is "
                                  f"none in {store.root}: materialize {stage.parent}_checkpoint first "
                                  f"(`shopdistill train --stage {stage.parent}`)", allow_retries=False) from exc
    return ref.to_dict(), str(store.local_path(ref)), store.lineage(ref)


def _corpus(stage: Stage, lake: LakeResource, dataset_version: str, dataset_manifest: dict,
            parent_lineage: dict) -> dict | None:
    """The train_corpus snapshot behind the chain: the stage's own (sft, kto), or its parent's."""
    version = dataset_version if stage.dataset == "train_corpus" else dataset_manifest.get("corpus")
    if version:
        return snapshot_ref("train_corpus", version, lake.read_manifest("train_corpus", version))
    return parent_lineage.get("corpus")


def _lineage(context, stage: Stage, lake: LakeResource, parent: dict, parent_lineage: dict, config: StageTrainConfig,
             ds_name: str, ds_config: dict) -> tuple[dict, str, dict]:
    version, manifest = latest_snapshot(context, lake, stage.dataset)
    corpus = _corpus(stage, lake, version, manifest, parent_lineage)
    corpus_manifest = lake.read_manifest("train_corpus", corpus["version"]) if corpus else {}
    days = sorted(set(manifest.get("days", [])) | set(corpus_manifest.get("days", [])))
    files = merge_files(manifest.get("firehose_files", {}), corpus_manifest.get("firehose_files", {}))
    lineage = build_lineage(
        stage.name, parent=parent, dataset=snapshot_ref(stage.dataset, version, manifest), corpus=corpus,
        days=days, firehose_files=files, hyperparameters=config.trainer_kwargs(stage.method),
        deepspeed={"name": ds_name, "config": ds_config}, leak_clusters_day=manifest.get("leak_clusters_day"))
    lineage["dagster"] = {"run_id": context.run.run_id, "asset": stage.asset}
    return lineage, version, manifest


def stage_method(stage: Stage, config: StageTrainConfig) -> dict[str, Any]:
    """The method settings a stage script reads besides the TRL config (recorded in lineage)."""
    if stage.method == "dr_grpo":
        return {"episode_reward": config.episode_reward, "catalog": str(project_home() / "arena" / "catalog")}
    if stage.method == "sft" and config.only_successful:
        return {"only_successful": True}
    return {}


def _pass_through(store: CheckpointStore, stage: Stage, parent_path: str, lineage: dict, reason: str):
    lineage = {**lineage, "training": {"trained": False, "reason": reason}}
    sha = content_sha256(Path(parent_path))
    card = model_card({**lineage, "checkpoint": {"stage": stage.name, "version": sha[:16], "sha256": sha}})
    return store.publish(stage.name, Path(parent_path), lineage, card)


def register_stage_policy(context, name: str, checkpoint_path: str) -> None:
    """The checkpoint as a policy named after its stage, and its policy_eval partition."""
    from shopdistill_assets.evaluation import policy_partitions
    from shopdistill_assets.policies_registry import PolicySpec, register

    register(PolicySpec(name=name, checkpoint=checkpoint_path))
    if not context.instance.has_dynamic_partition(policy_partitions.name, name):
        context.instance.add_dynamic_partitions(policy_partitions.name, [name])


def train_stage(context: AssetExecutionContext, stage: Stage, config: StageTrainConfig, lake: LakeResource,
                checkpoints: CheckpointStoreResource, launcher: TrainingLauncher) -> MaterializeResult:
    store = checkpoints.store()
    parent, parent_path, parent_lineage = _parent(stage, store, checkpoints)
    ds_name, ds_config = deepspeed_config(config.deepspeed or launcher.deepspeed_config)
    lineage, ds_version, ds_manifest = _lineage(context, stage, lake, parent, parent_lineage, config, ds_name, ds_config)
    rows = int(ds_manifest.get("rows") or 0)
    reported: dict[str, Any] = {}
    if rows == 0:
        reason = f"{stage.dataset} {ds_version} has no rows"
    else:
        stage_config = {
            "stage": stage.name, "model": parent_path, "dataset": lake.snapshot_version_uri(stage.dataset, ds_version),
            "output_dir": str(launcher.stage_dir(stage.name, context.run.run_id)),
            "trainer": config.trainer_kwargs(stage.method), "deepspeed": ds_config, "lineage": lineage,
            "publish_to": store.root, "s3_endpoint_url": store.endpoint_url,
            "method": stage_method(stage, config),
        }
        reported = launcher.launch(context, stage.method, stage_config)["metadata"]
        reason = reported.get("reason") if reported.get("status") == "nothing_to_learn" else None
        if reported.get("status") not in ("trained", "nothing_to_learn"):
            raise Failure(description=f"{stage.name}: the training job reported no checkpoint ({reported})")
    if reason is not None:
        context.log.warning(f"{stage.name}: nothing to learn ({reason}); passing {parent.get('version') or 'the base model'} on")
        ref = _pass_through(store, stage, parent_path, lineage, reason)
    else:
        ref = store.get(stage.name, reported["version"])
    register_stage_policy(context, stage.name, str(store.local_path(ref)))
    if stage.parent is None:
        register_stage_policy(context, "base", parent_path)
    trained = store.lineage(ref).get("training", {})
    return MaterializeResult(data_version=DataVersion(ref.sha256), metadata={
        "version": ref.version, "sha256": ref.sha256, "uri": MetadataValue.path(ref.uri),
        "status": "trained" if reason is None else "nothing_to_learn", "reason": reason or "",
        "parent": parent.get("version") or parent.get("base_model"), "dataset": f"{stage.dataset} {ds_version}",
        "dataset_rows": rows, "corpus": (lineage.get("corpus") or {}).get("version") or "",
        "days": len(lineage["days"]), "deepspeed": ds_name,
        **{k: trained[k] for k in ("steps", "final_loss", "first_loss", "tokens_per_s", "wall_s", "mfu")
           if trained.get(k) is not None},
        "hyperparameters": MetadataValue.json(lineage["hyperparameters"]),
    })


def checkpoint_asset(stage: Stage):
    deps = [stage.dataset] + ([f"{stage.parent}_checkpoint"] if stage.parent else [])

    @asset(name=stage.asset, group_name=GROUP, deps=deps, kinds={"deepspeed", "pytorch"}, pool="gpu",
           code_version=CODE_VERSION,
           description=f"The {stage.name} stage ({stage.method} on {stage.dataset}, from "
                       f"{stage.parent + ' ' if stage.parent else 'the base model'}"
                       f"{'checkpoint' if stage.parent else ''}): a DeepSpeed job; checkpoint + lineage in the store.")
    def _checkpoint(context: AssetExecutionContext, config: StageTrainConfig, lake: LakeResource,
                    checkpoints: CheckpointStoreResource, launcher: TrainingLauncher) -> MaterializeResult:
        return train_stage(context, stage, config, lake, checkpoints, launcher)

    return _checkpoint


CHECKPOINT_ASSETS = [checkpoint_asset(stage) for stage in STAGES.values()]
REPORT_POLICIES = ["base", *STAGES]


@asset(group_name=GROUP, deps=["policy_eval"], kinds={"python"},
       description="Held-out ASR, pass@1 and pass@k of the base model and each stage's checkpoint (table + PNG).")
def training_report(context: AssetExecutionContext, lake: LakeResource) -> MaterializeResult:
    from shopdistill_assets.core.training_report import collect, plot_stages, stages_table

    rows = collect(lake, REPORT_POLICIES)
    if not rows:
        raise Failure(description="no policy_eval results for the stages yet: materialize policy_eval for "
                                  f"{', '.join(REPORT_POLICIES)}", allow_retries=False)
    png = plot_stages(rows, project_home() / "eval" / "training_report.png")
    return MaterializeResult(metadata={
        "table": MetadataValue.md(stages_table(rows)), "plot": MetadataValue.path(str(png)),
        **{f"asr/{r['policy']}": r["asr"] for r in rows}, "policies": len(rows)})


TRAINING_ASSETS = [*CHECKPOINT_ASSETS, training_report]
