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
    DataVersion,
    Failure,
    MaterializeResult,
    MetadataValue,
    PermissiveConfig,
    asset,
)
from pydantic import Field

from resources.checkpoint_store import CheckpointNotFound, CheckpointStore, content_sha256
from resources.checkpoints import TINY_BASE, CheckpointStoreResource
from resources.lake import LakeResource
from resources.launcher import TrainingLauncher, deepspeed_config
from shopdistill_assets.instance import project_home
from shopdistill_assets.training.data_assets import latest_snapshot
from shopdistill_assets.training.lineage import build_lineage, merge_files, model_card, snapshot_ref
from shopdistill_assets.training.stages import STAGES, Stage

GROUP = "training"
CODE_VERSION = "train-v1"


class StageTrainConfig(PermissiveConfig):
    """One stage run's settings: any key of the stage script's typed configs, passed through to
    it as they are (its TRL config class, `SFTConfig` / `KTOConfig` / `GRPOConfig`: `max_steps`,
    `learning_rate`, `max_length`, `beta`, `num_generations`, …; TRL's `ModelConfig`: `use_peft`,
    `lora_r`, `lora_alpha`, …; the script's own: `only_successful`, `too_long`, `episode_reward`).
    The script's `TrlParser` is the one place they are declared and checked; what is left out
    takes the method's default. Only what the orchestrator itself reads is declared here."""

    deepspeed: str | None = Field(None, description="zero2 | zero3 | a JSON file (default: the launcher's)")
    trainer_json: str = Field("{}", description="more keys, as one JSON object (the CLI's --trainer-json)")

    def overrides(self) -> dict[str, Any]:
        """The keys given for the stage script (typed configs' fields), extras and trainer_json."""
        try:
            extra = json.loads(self.trainer_json or "{}")
        except ValueError as exc:
            raise Failure(description=f"trainer_json is not JSON: {exc}", allow_retries=False) from None
        if not isinstance(extra, dict):
            raise Failure(description="trainer_json must be a JSON object", allow_retries=False)
        reserved = sorted(set(extra) & ORCHESTRATED)
        if reserved:
            raise Failure(description=f"{reserved} are set by the orchestrator, not by a stage config",
                          allow_retries=False)
        return {**(self.model_extra or {}), **extra}


# What the asset sets in a stage config; a user's stage config cannot override these.
ORCHESTRATED = {"stage", "dataset", "model_name_or_path", "output_dir", "lineage", "publish_to", "s3_endpoint_url",
                "state_uri", "catalog"}


def base_model_path(base_model: str, models_dir: Path) -> str:
    """The base model as the trainers load it: a Hugging Face id or folder as given; the tiny random
    Qwen3 (`TINY_BASE`) is built once under `models_dir`, offline."""
    if base_model != TINY_BASE:
        return base_model
    target = models_dir / TINY_BASE
    if not (target / "config.json").exists():
        from shopdistill_assets.training.tiny_model import build_tiny_model

        build_tiny_model(target)
    return str(target)


def _parent(stage: Stage, store: CheckpointStore, checkpoints: CheckpointStoreResource) -> tuple[dict, str, dict]:
    """(parent entry for lineage, local model path, parent lineage or {}) for a stage."""
    if stage.parent is None:
        path = base_model_path(checkpoints.base_model, project_home() / "models")
        local = Path(path)
        sha = content_sha256(local) if local.is_dir() else None
        return {"base_model": checkpoints.base_model, "path": path, "sha256": sha}, path, {}
    try:
        ref = store.latest(stage.parent)
    except CheckpointNotFound as exc:
        raise Failure(description=f"{stage.name} starts from the newest {stage.parent} checkpoint, and there is "
                                  f"none in {store.root}: materialize {stage.parent}_checkpoint first "
                                  f"(`shopdistill train --stage {stage.parent}`)", allow_retries=False) from exc
    return ref.to_dict(), ref.uri, store.lineage(ref)


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
        days=days, firehose_files=files, hyperparameters=config.overrides(),
        deepspeed={"name": ds_name, "config": ds_config}, leak_clusters_day=manifest.get("leak_clusters_day"))
    lineage["dagster"] = {"run_id": context.run.run_id, "asset": stage.asset}
    return lineage, version, manifest


def stage_extras(stage: Stage, store: CheckpointStore, launcher: TrainingLauncher) -> dict[str, Any]:
    """What a method's script needs besides the data: dr_grpo's sandbox catalogue (uploaded to the
    store, content-addressed, when the stage runs where this folder is not)."""
    if stage.method != "dr_grpo":
        return {}
    catalog = project_home() / "arena" / "catalog"
    if not launcher.remote or not catalog.is_dir():
        return {"catalog": str(catalog)}
    return {"catalog": store.ensure_tree(catalog, "catalog")}


def _parent_folder(store: CheckpointStore, parent: dict, parent_uri: str) -> Path:
    """The parent's weights as a local folder (downloaded for an S3 store)."""
    if parent.get("stage"):
        return store.local_path(store.get(parent["stage"], parent["version"]))
    return Path(parent_uri)


def _pass_through(store: CheckpointStore, stage: Stage, parent_folder: Path, lineage: dict, reason: str,
                  counts: dict[str, Any]):
    lineage = {**lineage, "training": {"trained": False, "reason": reason, **counts}}
    sha = content_sha256(parent_folder)
    card = model_card({**lineage, "checkpoint": {"stage": stage.name, "version": sha[:16], "sha256": sha}})
    return store.publish(stage.name, parent_folder, lineage, card)


def register_stage_policy(context, name: str, checkpoint_path: str) -> None:
    """The checkpoint as a policy named after its stage, and its policy_eval partition."""
    from shopdistill_assets.agent.policies_registry import PolicySpec, policy_partitions, register

    register(PolicySpec(name=name, checkpoint=checkpoint_path))
    if not context.instance.has_dynamic_partition(policy_partitions.name, name):
        context.instance.add_dynamic_partitions(policy_partitions.name, [name])


def stage_config(context, stage: Stage, config: StageTrainConfig, store: CheckpointStore, launcher: TrainingLauncher,
                 *, parent_uri: str, dataset_uri: str, ds_config: dict, lineage: dict) -> dict[str, Any]:
    """The YAML a stage script parses (its three typed configs' keys): the user's keys, then what
    the orchestrator sets. `state_uri` is keyed by the run's root, so a retry resumes."""
    run_key = context.run.root_run_id or context.run.run_id
    if launcher.remote and not all(u.startswith("s3://") for u in (parent_uri, dataset_uri, store.root)) \
            and not parent_uri.count("/") == 1:  # a Hugging Face id (org/name) is fetched by the pod itself
        raise Failure(description=f"{stage.name}: a GPU pod shares no folder with this process; the lake, the "
                                  f"checkpoint store and the parent must be s3:// (got {dataset_uri}, {store.root}, "
                                  f"{parent_uri})", allow_retries=False)
    return {
        **config.overrides(), "stage": stage.name, "model_name_or_path": parent_uri, "dataset": dataset_uri,
        "output_dir": launcher.output_dir(stage.name, context.run.run_id), "deepspeed": ds_config,
        "lineage": lineage, "publish_to": store.root, "s3_endpoint_url": store.endpoint_url,
        "peak_tflops": launcher.peak_tflops, "state_uri": store.run_uri(stage.name, run_key, "state"),
        **stage_extras(stage, store, launcher),
    }


def launch_stage(context, stage: Stage, store: CheckpointStore, launcher: TrainingLauncher,
                 values: dict[str, Any]) -> dict[str, Any]:
    """Write the stage config to the store (by reference: a pod's environment could not hold a
    long lineage) and launch the script on it; returns what rank 0 reported."""
    import yaml

    run_key = context.run.root_run_id or context.run.run_id
    text = yaml.safe_dump(json.loads(json.dumps(values, default=str)), sort_keys=True)
    uri = store.put_text(store.run_uri(stage.name, run_key, f"{context.run.run_id}.yaml"), text)
    env = {"SHOPDISTILL_S3_ENDPOINT_URL": store.endpoint_url} if store.endpoint_url else {}
    return launcher.launch(context, stage.script, uri, values["output_dir"], env)["metadata"]


def train_stage(context: AssetExecutionContext, stage: Stage, config: StageTrainConfig, lake: LakeResource,
                checkpoints: CheckpointStoreResource, launcher: TrainingLauncher) -> MaterializeResult:
    store = checkpoints.store()
    parent, parent_uri, parent_lineage = _parent(stage, store, checkpoints)
    ds_name, ds_config = deepspeed_config(config.deepspeed or launcher.deepspeed_config)
    lineage, ds_version, ds_manifest = _lineage(context, stage, lake, parent, parent_lineage, config, ds_name, ds_config)
    rows = int(ds_manifest.get("rows") or 0)
    reported: dict[str, Any] = {}
    if rows == 0:
        reason = f"{stage.dataset} {ds_version} has no rows"
    else:
        values = stage_config(context, stage, config, store, launcher, parent_uri=parent_uri, ds_config=ds_config,
                              dataset_uri=lake.snapshot_version_uri(stage.dataset, ds_version), lineage=lineage)
        reported = launch_stage(context, stage, store, launcher, values)
        reason = reported.get("reason") if reported.get("status") == "nothing_to_learn" else None
        if reported.get("status") not in ("trained", "nothing_to_learn"):
            raise Failure(description=f"{stage.name}: the training job reported no checkpoint ({reported})")
    if reason is not None:
        context.log.warning(f"{stage.name}: nothing to learn ({reason}); passing {parent.get('version') or 'the base model'} on")
        counts = {k: v for k, v in reported.items() if k.startswith("rows") or k in ("desirable", "undesirable")}
        ref = _pass_through(store, stage, _parent_folder(store, parent, parent_uri), lineage, reason, counts)
    else:
        ref = store.get(stage.name, reported["version"])
    register_stage_policy(context, stage.name, str(store.local_path(ref)))
    if stage.parent is None:
        register_stage_policy(context, "base", parent_uri)
    trained = store.lineage(ref).get("training", {})
    return MaterializeResult(data_version=DataVersion(ref.sha256), metadata={
        "version": ref.version, "sha256": ref.sha256, "uri": MetadataValue.path(ref.uri),
        "status": "trained" if reason is None else "nothing_to_learn", "reason": reason or "",
        "parent": parent.get("version") or parent.get("base_model"), "dataset": f"{stage.dataset} {ds_version}",
        "dataset_rows": rows, "corpus": (lineage.get("corpus") or {}).get("version") or "",
        "days": len(lineage["days"]), "deepspeed": ds_name,
        **{k: trained[k] for k in ("steps", "final_loss", "first_loss", "tokens_per_s", "wall_s", "mfu", "rows",
                                   "rows_too_long_dropped", "resumed_from_step") if trained.get(k) is not None},
        **loss_curve_metadata(stage.name, trained.get("loss_curve")),
        "hyperparameters": MetadataValue.json(lineage["hyperparameters"]),
        "effective": MetadataValue.json(store.lineage(ref).get("effective") or {}),
    })


def loss_curve_metadata(stage: str, curve: list | None) -> dict[str, Any]:
    """The stage's loss curve inline (a PNG in markdown: the UI shows it, not a path)."""
    if not curve:
        return {}
    from shopdistill_assets.training.report import curve_markdown

    return {"loss_curve": MetadataValue.md(curve_markdown(stage, curve))}


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
REPORT_POLICIES = ["base", *STAGES, "random", "oracle"]  # the scripted baselines where they were evaluated


@asset(group_name=GROUP, deps=["policy_eval"], kinds={"python"},
       description="Held-out ASR, pass@1 and pass@k of the base model and each stage's checkpoint (table + PNG).")
def training_report(context: AssetExecutionContext, lake: LakeResource) -> MaterializeResult:
    from shopdistill_assets.training.report import collect, plot_stages, png_markdown, stages_figure, stages_table

    rows = collect(lake, REPORT_POLICIES)
    if not rows:
        raise Failure(description="no policy_eval results for the stages yet: materialize policy_eval for "
                                  f"{', '.join(REPORT_POLICIES)}", allow_retries=False)
    png = plot_stages(rows, project_home() / "eval" / "training_report.png")
    return MaterializeResult(metadata={
        "table": MetadataValue.md(stages_table(rows)), "plot": MetadataValue.md(png_markdown(stages_figure(rows),
                                                                                               "held-out ASR by stage")),
        "plot_file": MetadataValue.path(str(png)),
        **{f"samples/{r['policy']}": f"{r['problems']}x{r.get('samples')}" for r in rows},
        **{f"asr/{r['policy']}": r["asr"] for r in rows}, "policies": len(rows)})


TRAINING_ASSETS = [*CHECKPOINT_ASSETS, training_report]
