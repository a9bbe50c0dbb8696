"""What the firehose holds, day by day, for the sensor: a fingerprint per day folder.

A day's fingerprint covers its day files' names, sizes and versions (S3 ETag, local mtime), so a
new day, a late file and a re-uploaded file each change it. Only names are listed, nothing is
read: the sensor stays cheap, and raw_firehose hashes the bytes when the run comes.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from resources.firehose import FirehoseResource, is_day_file
from resources.s3 import is_s3_uri, list_objects, parse_s3_uri

_DAY_FOLDER = re.compile(r"^day=(\d{4}-\d{2}-\d{2})$")


def _fingerprint(entries: list[tuple[str, int, str, float]]) -> str:
    digest = hashlib.sha256()
    for name, size, version, _ in sorted(entries):
        digest.update(f"{name}\x1f{size}\x1f{version}\n".encode("utf-8", "backslashreplace"))
    return digest.hexdigest()[:20]


def _local_entries(root: Path) -> dict[str, list[tuple[str, int, str]]]:
    days: dict[str, list] = {}
    if not root.is_dir():
        return days
    for folder in root.iterdir():
        match = _DAY_FOLDER.match(folder.name)
        if not match or not folder.is_dir():
            continue
        for path in folder.iterdir():
            if path.is_file() and is_day_file(path.name):
                stat = path.stat()
                days.setdefault(match.group(1), []).append(
                    (path.name, stat.st_size, str(stat.st_mtime_ns), stat.st_mtime))
    return days


def _s3_entries(firehose: FirehoseResource) -> dict[str, list[tuple[str, int, str]]]:
    bucket, prefix = parse_s3_uri(firehose.root)
    base = f"{prefix}/" if prefix else ""
    days: dict[str, list] = {}
    for obj in list_objects(firehose.s3_client(), bucket, base):
        folder, _, name = obj["Key"][len(base):].partition("/")
        match = _DAY_FOLDER.match(folder)
        if match and "/" not in name and is_day_file(name):
            # LastModified has whole seconds: count the second as a whole (run again, not skip)
            changed = obj["LastModified"].timestamp() + 1.0 if obj.get("LastModified") else float("inf")
            days.setdefault(match.group(1), []).append((name, obj["Size"], obj.get("ETag", ""), changed))
    return days


def scan_firehose(firehose: FirehoseResource) -> dict[str, tuple[str, float]]:
    """day -> (fingerprint, when its newest file last changed, epoch seconds), for every day
    folder holding at least one day file."""
    entries = _s3_entries(firehose) if is_s3_uri(firehose.root) else _local_entries(Path(firehose.root))
    return {day: (_fingerprint(files), max(f[3] for f in files)) for day, files in entries.items()}


def scan_days(firehose: FirehoseResource) -> dict[str, str]:
    """day -> fingerprint, for every day folder holding at least one day file."""
    return {day: fp for day, (fp, _) in scan_firehose(firehose).items()}


def day_has_files(firehose: FirehoseResource, day: str) -> bool:
    try:
        return bool(firehose.list_day(day))
    except LookupError:
        return False


def ingested_since(ingested_at: dict[str, float], changed_at: dict[str, float]) -> set[str]:
    """Days whose raw_firehose was materialized after their newest file changed: a run (the
    demo's, the CLI's) already read exactly these files, so the sensor need not request them."""
    return {day for day, at in ingested_at.items() if day in changed_at and at > changed_at[day]}


def changed_days(seen: dict[str, str], current: dict[str, str], processable) -> list[str]:
    """Days to run: new, or whose fingerprint moved since `seen`; only processable ones."""
    return sorted(day for day, fp in current.items() if processable(day) and seen.get(day) != fp)
