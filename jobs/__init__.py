"""Jobs, schedules, sensors and backfill helpers."""

from jobs.schedules import corpus_daily_job, corpus_daily_schedule

__all__ = ["corpus_daily_job", "corpus_daily_schedule"]
