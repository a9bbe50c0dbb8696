"""Training jobs: one per stage (its training data, then its checkpoint), the whole chain, and a
sensor that evaluates each new checkpoint on the held-out set."""

from __future__ import annotations

from dagster import (
    AssetKey,
    AssetSelection,
    DefaultSensorStatus,
    RunRequest,
    define_asset_job,
    multi_asset_sensor,
)

from shopdistill_assets.train import STAGES

STAGE_JOBS = {
    name: define_asset_job(f"train_{name}", selection=AssetSelection.assets(*stage.rollouts, stage.asset),
                           description=f"The {name} stage alone: rebuild its training data, then train from the "
                                       f"newest {stage.parent or 'base model'} checkpoint.")
    for name, stage in STAGES.items()
}

train_chain_job = define_asset_job(
    "train_chain", selection=AssetSelection.groups("training_data", "training") - AssetSelection.assets("training_report"),
    description="All five stages in order, with their training data.")

policy_eval_job = define_asset_job("policy_eval_job", selection=AssetSelection.assets("policy_eval"),
                                   description="Held-out evaluation of one policy (a dynamic partition).")


@multi_asset_sensor(
    monitored_assets=[AssetKey(stage.asset) for stage in STAGES.values()], job=policy_eval_job,
    default_status=DefaultSensorStatus.STOPPED, minimum_interval_seconds=60,
    description="A new checkpoint of a stage -> policy_eval of that stage's policy (its partition).")
def checkpoint_eval_sensor(context):
    for key, record in context.latest_materialization_records_by_key().items():
        if record is None:
            continue
        stage = key.path[-1].removesuffix("_checkpoint")
        yield RunRequest(run_key=f"{stage}:{record.storage_id}", partition_key=stage)
        context.advance_cursor({key: record})


TRAINING_JOBS = [*STAGE_JOBS.values(), train_chain_job, policy_eval_job]
TRAINING_SENSORS = [checkpoint_eval_sensor]
