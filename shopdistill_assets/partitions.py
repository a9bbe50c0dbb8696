"""Partitions shared by the daily assets: one partition per UTC firehose day."""

from __future__ import annotations

from dagster import DailyPartitionsDefinition

from shopdistill_assets.core.days import DayError, parse_day
from shopdistill_assets.settings import DEFAULT_START_DATE, START_DATE as START_DATE_VAR, start_date

__all__ = ["DEFAULT_START_DATE", "START_DATE", "daily_partitions"]

# The first firehose day the pipeline knows; a deployment that backfills further sets
# SHOPDISTILL_START_DATE (read at import, so every process of a deployment must agree).
START_DATE = start_date()
try:
    parse_day(START_DATE)
except DayError as exc:
    raise DayError(f"{START_DATE_VAR}: {exc}") from None

# end_offset=0: the last partition is the last complete UTC day (yesterday).
daily_partitions = DailyPartitionsDefinition(start_date=START_DATE, end_offset=0, timezone="UTC")
