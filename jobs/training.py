"""Training jobs: one per stage (its training data, then its checkpoint), the whole chain, and a
sensor that evaluates each new checkpoint on the held-out set."""

from __future__ import annotations

import json

from dagster import (
    AssetKey,
    AssetRecordsFilter,
    AssetSelection,
    DefaultSensorStatus,
    RunRequest,
    define_asset_job,
    sensor,
)

from shopdistill_assets.training.stages import STAGES

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


def _latest_storage_id(instance, asset: str, partition: str | None = None) -> int | None:
    records_filter = AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[partition] if partition else None)
    records = instance.fetch_materializations(records_filter, limit=1).records
    return records[0].storage_id if records else None


# Running by default, like the firehose sensor: a checkpoint trained from the UI gets evaluated.
# A checkpoint that already has a later evaluation (the demo's) is not evaluated again.
@sensor(job=policy_eval_job, default_status=DefaultSensorStatus.RUNNING, minimum_interval_seconds=60,
        description="A new checkpoint of a stage -> policy_eval of that stage's policy (its partition).")
def checkpoint_eval_sensor(context):
    seen = json.loads(context.cursor) if context.cursor else {}
    for stage in STAGES.values():
        checkpoint = _latest_storage_id(context.instance, stage.asset)
        if checkpoint is None or seen.get(stage.name, -1) >= checkpoint:
            continue
        seen[stage.name] = checkpoint
        if (_latest_storage_id(context.instance, "policy_eval", stage.name) or -1) > checkpoint:
            continue
        yield RunRequest(run_key=f"{stage.name}:{checkpoint}", partition_key=stage.name)
    context.update_cursor(json.dumps(seen, sort_keys=True))


TRAINING_JOBS = [*STAGE_JOBS.values(), train_chain_job, policy_eval_job]
TRAINING_SENSORS = [checkpoint_eval_sensor]
