"""Training jobs: one per stage (its training data, then its checkpoint), the whole chain, and a
sensor that evaluates each new checkpoint on the held-out set."""

from __future__ import annotations

import json

from dagster import AssetKey, AssetSelection, DefaultSensorStatus, RunRequest, define_asset_job, sensor

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


@sensor(job=policy_eval_job, default_status=DefaultSensorStatus.STOPPED, minimum_interval_seconds=60,
        description="A new checkpoint of a stage -> policy_eval of that stage's policy (its partition).")
def checkpoint_eval_sensor(context):
    seen = json.loads(context.cursor) if context.cursor else {}
    for stage in STAGES.values():
        event = context.instance.get_latest_materialization_event(AssetKey(stage.asset))
        if event is None or seen.get(stage.name, -1) >= event.storage_id:
            continue
        seen[stage.name] = event.storage_id
        yield RunRequest(run_key=f"{stage.name}:{event.storage_id}", partition_key=stage.name)
    context.update_cursor(json.dumps(seen, sort_keys=True))


TRAINING_JOBS = [*STAGE_JOBS.values(), train_chain_job, policy_eval_job]
TRAINING_SENSORS = [checkpoint_eval_sensor]
