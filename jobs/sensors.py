"""The firehose sensor: one corpus run per new day folder, and again when its files change."""

from __future__ import annotations

import json

from dagster import (
    AssetKey,
    AssetRecordsFilter,
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from jobs.firehose_days import changed_days, ingested_since, scan_firehose
from jobs.schedules import corpus_daily_job
from resources.firehose import FirehoseResource
from shopdistill_assets.partitions import daily_partitions


# Running by default: a day is processed as soon as its folder appears (local or S3), only days
# that have arrived are ever run, and a late or re-uploaded file runs its day again. The cursor
# is the fingerprint of each day already requested; the run key repeats it, so a day's content
# is requested once even if a cursor update were lost.
@sensor(job=corpus_daily_job, minimum_interval_seconds=60, default_status=DefaultSensorStatus.RUNNING,
        description="A corpus_daily run per new firehose day folder, and per late or re-uploaded file.")
def firehose_day_sensor(context: SensorEvaluationContext, firehose: FirehoseResource) -> SensorResult:
    seen = json.loads(context.cursor) if context.cursor else {}
    scanned = scan_firehose(firehose)
    current = {day: fp for day, (fp, _) in scanned.items()}
    days = changed_days(seen, current, daily_partitions.has_partition_key)
    # Days a run has already ingested since their files last changed (the demo's days, on the
    # first tick of `make dev`) are taken as seen, not run again.
    done = ingested_since(_ingested_at(context, days), {day: at for day, (_, at) in scanned.items()})
    if done:
        context.log.info(f"already ingested since their files changed: {', '.join(sorted(done))}")
        days = [day for day in days if day not in done]
    requests = [RunRequest(run_key=f"{day}@{current[day]}", partition_key=day,
                           tags={"shopdistill/trigger": "firehose_day_sensor"}) for day in days]
    # Days that are not partitions yet (today's folder, still filling) stay out of the cursor:
    # they are requested once they have ended.
    cursor = {day: fp for day, fp in current.items() if daily_partitions.has_partition_key(day)}
    if days:
        context.log.info(f"firehose {firehose.root}: requesting {', '.join(days)}")
    return SensorResult(run_requests=requests, cursor=json.dumps(cursor, sort_keys=True))


def _ingested_at(context: SensorEvaluationContext, days: list[str]) -> dict[str, float]:
    """day -> when raw_firehose[day] was last materialized, for the days given (only days the
    cursor does not know yet: on the first tick every day, then only new or changed ones)."""
    latest: dict[str, float] = {}
    for day in days:
        records = context.instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey("raw_firehose"), asset_partitions=[day]), limit=1).records
        if records:
            latest[day] = records[0].timestamp
    return latest
