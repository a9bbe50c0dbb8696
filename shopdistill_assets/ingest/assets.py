"""raw_firehose[day]: the inventory of one firehose day and its content hash.

Nothing is parsed here: the asset records which files the day holds and what bytes they are,
so every later table can say exactly which input it came from, and the day's data version
changes when (and only when) a file is added, removed or re-uploaded with other bytes.
"""

# No `from __future__ import annotations` in asset modules: Dagster inspects the annotations of
# `context` and of resource parameters at decoration time and does not resolve strings.
import hashlib
from collections.abc import Sequence

import pyarrow as pa
from dagster import (
    AssetExecutionContext,
    DataVersion,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)

from resources.firehose import FirehoseDayMissing, FirehoseResource
from resources.lake import LakeResource
from shopdistill_assets.partitions import daily_partitions

RAW_FIREHOSE = "raw_firehose"
INVENTORY_SCHEMA = pa.schema(
    [
        ("file", pa.string()),
        ("uri", pa.string()),
        ("size_bytes", pa.int64()),
        ("sha256", pa.string()),
        ("compression", pa.string()),
    ]
)
_MARKDOWN_ROWS = 50  # metadata stays small: a day of thousands of files is summarised


def day_fingerprint(inventory: Sequence[dict]) -> str:
    """sha256 over the day's (file, sha256) pairs sorted by file name, each pair written as
    `file \\x1f sha256 \\n`. The URI is left out so a moved firehose keeps its version."""
    digest = hashlib.sha256()
    for row in sorted(inventory, key=lambda r: r["file"]):
        digest.update(f"{row['file']}\x1f{row['sha256']}\n".encode())
    return digest.hexdigest()


def inventory_markdown(inventory: Sequence[dict]) -> str:
    lines = ["| file | size (MB) | sha256 |", "|---|---:|---|"]
    for row in inventory[:_MARKDOWN_ROWS]:
        size_mb = row["size_bytes"] / 1e6
        lines.append(f"| `{row['file']}` | {size_mb:.3f} | `{row['sha256'][:12]}` |")
    if len(inventory) > _MARKDOWN_ROWS:
        lines.append(f"| … {len(inventory) - _MARKDOWN_ROWS} more | | |")
    return "\n".join(lines)


@asset(
    partitions_def=daily_partitions,
    # Where the oro_api source is used, oro_api_day[day] writes the day file first (a run with
    # both runs them in order and skips this one when the landing failed); otherwise unselected.
    deps=["oro_api_day"],
    code_version="1",
    group_name="ingest",
    kinds={"python", "parquet"},
    description="Inventory (name, URI, size, sha256) of one firehose day; data version = "
    "sha256 over its sorted (file, sha256) pairs.",
)
def raw_firehose(
    context: AssetExecutionContext, firehose: FirehoseResource, lake: LakeResource
) -> MaterializeResult:
    day = context.partition_key
    try:
        files = firehose.list_day(day)
    except FirehoseDayMissing as exc:
        raise Failure(
            description=str(exc),
            metadata={"firehose_root": firehose.root, "day": day},
            allow_retries=False,
        ) from exc

    inventory = [
        {
            "file": f.name,
            "uri": f.uri,
            "size_bytes": f.size_bytes,
            "sha256": firehose.file_sha256(f),
            "compression": f.compression,
        }
        for f in files
    ]
    part = lake.write_day(RAW_FIREHOSE, day, pa.Table.from_pylist(inventory, INVENTORY_SCHEMA))
    total_bytes = sum(row["size_bytes"] for row in inventory)
    context.log.info(f"{day}: {len(inventory)} files, {total_bytes} bytes → {part}")
    return MaterializeResult(
        metadata={
            "dagster/row_count": len(inventory),
            "total_bytes": total_bytes,
            "files": MetadataValue.md(inventory_markdown(inventory)),
            "firehose_root": firehose.root,
            "lake_path": MetadataValue.path(part),
        },
        data_version=DataVersion(day_fingerprint(inventory)),
    )
