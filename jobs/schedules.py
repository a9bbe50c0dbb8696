"""The daily corpus job and its schedule (a catch-up for deployments that keep sensors off)."""

from __future__ import annotations

import datetime as dt

from dagster import (
    AssetSelection,
    DefaultScheduleStatus,
    RunRequest,
    ScheduleEvaluationContext,
    SkipReason,
    define_asset_job,
    schedule,
)

from jobs.firehose_days import day_has_files
from resources.firehose import FirehoseResource
from shopdistill_assets.partitions import daily_partitions

# Everything that turns one firehose day into corpus tables, one day per run. The split and the
# snapshots are not in it: they follow by automation conditions (jobs/automation.py), in day
# order, whatever order the day runs finish in.
corpus_daily_job = define_asset_job(
    "corpus_daily",
    selection=AssetSelection.groups("ingest", "corpus"),
    description="Ingest one firehose day and build its corpus tables.",
)


# 02:00 UTC, for the day that just ended; stopped by default (the firehose sensor is the
# trigger). A day whose folder has not arrived is skipped, not run red.
@schedule(job=corpus_daily_job, cron_schedule="0 2 * * *", execution_timezone="UTC",
          default_status=DefaultScheduleStatus.STOPPED, name="corpus_daily_schedule",
          description="Yesterday's firehose day at 02:00 UTC, when its folder exists (skipped otherwise).")
def corpus_daily_schedule(context: ScheduleEvaluationContext, firehose: FirehoseResource):
    tick = context.scheduled_execution_time.astimezone(dt.timezone.utc)
    day = (tick.date() - dt.timedelta(days=1)).isoformat()
    if not daily_partitions.has_partition_key(day):
        return SkipReason(f"{day} is not a daily partition (before SHOPDISTILL_START_DATE?)")
    if not day_has_files(firehose, day):
        return SkipReason(f"firehose day {day} has not arrived under {firehose.root}")
    return RunRequest(run_key=day, partition_key=day)
