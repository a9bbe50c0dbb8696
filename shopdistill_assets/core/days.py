"""Which firehose days can be processed: a real UTC date from the start date to yesterday.

Checked before any work so that a bad `--day` costs nothing and says how to fix it; the same
rule as the daily partitions (start date, `end_offset=0`: a day is processed once it has ended).
"""

from __future__ import annotations

import datetime as dt
import re

_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class DayError(ValueError):
    """A day that is not a processable partition; the message says why and what to do."""


def parse_day(text: str) -> dt.date:
    if not isinstance(text, str) or not _DAY.match(text):
        raise DayError(f"day {text!r} is not a date in YYYY-MM-DD form (e.g. 2026-11-02)")
    try:
        return dt.date.fromisoformat(text)
    except ValueError as exc:
        raise DayError(f"day {text!r} is not a calendar date ({exc})") from None


def last_complete_day(now: dt.datetime | None = None) -> dt.date:
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.astimezone(dt.timezone.utc).date() - dt.timedelta(days=1)


def check_day(text: str, start: str, now: dt.datetime | None = None) -> str:
    """`text` if it is a processable day, else a DayError naming the rule it breaks."""
    day = parse_day(text)
    first = parse_day(start)
    last = last_complete_day(now)
    if day < first:
        raise DayError(f"day {text} is before the first partition {first} "
                       f"(set SHOPDISTILL_START_DATE to an earlier date to process it)")
    if day > last:
        raise DayError(f"day {text} has not ended yet (UTC): the last complete day is {last}")
    return text


def check_days(texts: list[str], start: str, now: dt.datetime | None = None) -> list[str]:
    """Every day checked before any is processed; sorted, duplicates dropped."""
    return sorted({check_day(t, start, now) for t in texts})
