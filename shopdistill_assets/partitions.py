"""Partitions shared by the daily assets: one partition per UTC firehose day."""

from __future__ import annotations

import os

from dagster import DailyPartitionsDefinition

DEFAULT_START_DATE = "2026-11-01"

# The first firehose day the pipeline knows; a deployment that backfills further sets
# SHOPDISTILL_START_DATE (read at import, so every process of a deployment must agree).
START_DATE = os.environ.get("SHOPDISTILL_START_DATE", DEFAULT_START_DATE)

# end_offset=0: the last partition is the last complete UTC day (yesterday).
daily_partitions = DailyPartitionsDefinition(start_date=START_DATE, end_offset=0, timezone="UTC")
