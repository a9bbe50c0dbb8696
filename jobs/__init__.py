"""Jobs, schedules, sensors and automation conditions."""

from jobs.automation import CONDITIONS
from jobs.schedules import corpus_daily_job, corpus_daily_schedule
from jobs.sensors import firehose_day_sensor

__all__ = ["CONDITIONS", "corpus_daily_job", "corpus_daily_schedule", "firehose_day_sensor"]
