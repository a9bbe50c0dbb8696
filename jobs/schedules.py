"""The daily corpus job and its schedule."""

from __future__ import annotations

from dagster import AssetSelection, build_schedule_from_partitioned_job, define_asset_job

# Everything that turns one firehose day into corpus tables. Selecting by group keeps the job
# current as corpus assets are added; an empty group selects nothing and is not an error.
# The daily partitioning comes from the selected assets (Dagster 1.13 deprecates passing
# partitions_def here).
corpus_daily_job = define_asset_job(
    "corpus_daily",
    selection=AssetSelection.groups("ingest", "corpus"),
    description="Ingest one firehose day and build its corpus tables.",
)

# Runs at 02:00 UTC for the day that just ended (the partition's end_offset is 0).
corpus_daily_schedule = build_schedule_from_partitioned_job(corpus_daily_job, hour_of_day=2)
