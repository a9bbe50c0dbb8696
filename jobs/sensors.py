"""The firehose sensor: one corpus run per new day folder, and again when its files change."""

from __future__ import annotations

import json

from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SensorResult, sensor

from jobs.firehose_days import changed_days, scan_days
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
    current = scan_days(firehose)
    days = changed_days(seen, current, daily_partitions.has_partition_key)
    requests = [RunRequest(run_key=f"{day}@{current[day]}", partition_key=day,
                           tags={"shopdistill/trigger": "firehose_day_sensor"}) for day in days]
    # Days that are not partitions yet (today's folder, still filling) stay out of the cursor:
    # they are requested once they have ended.
    cursor = {day: fp for day, fp in current.items() if daily_partitions.has_partition_key(day)}
    if days:
        context.log.info(f"firehose {firehose.root}: requesting {', '.join(days)}")
    return SensorResult(run_requests=requests, cursor=json.dumps(cursor, sort_keys=True))
