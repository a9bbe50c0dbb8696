"""SQL over the lake: one DuckDB view per lake table, local or S3.

Views are built from the part files each table holds now, as listed by `LakeResource` (never a
raw glob: a day folder being replaced must not show two versions). Daily tables get a `lake_day`
column, snapshot tables a `lake_version` column. S3 is read through an fsspec filesystem over
pyarrow's S3 client (DuckDB's own httpfs is an extension it would download at run time).
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pyarrow as pa

from resources.lake import LakeResource
from resources.s3 import is_s3_uri, list_prefixes, parse_s3_uri

_TABLE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]{0,99}$")


def lake_tables(lake: LakeResource) -> list[str]:
    """Names of the lake's top-level table folders (staging and other hidden folders left out)."""
    if is_s3_uri(lake.root):
        bucket, prefix = parse_s3_uri(lake.root)
        names = list_prefixes(lake.s3_client(), bucket, f"{prefix}/" if prefix else "")
    else:
        root = Path(lake.root)
        names = [p.name for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
    return sorted(n for n in names if _TABLE.match(n))


def table_parts(lake: LakeResource, table: str) -> tuple[str, list[tuple[str, str]]]:
    """("daily" | "snapshot", [(URI of a current part file, its day or version)])."""
    days = lake.list_days(table)
    if days:
        return "daily", [(uri, day) for day in days for uri in lake.day_part_uris(table, day)]
    return "snapshot", [(uri, v) for v in lake.list_snapshots(table) for uri in lake.snapshot_part_uris(table, v)]


def _s3_filesystem(lake: LakeResource):
    from fsspec.implementations.arrow import ArrowFSWrapper
    from pyarrow.fs import S3FileSystem

    class S3ArrowFS(ArrowFSWrapper):
        protocol = "s3"

    endpoint = lake.endpoint_url
    kwargs = {"endpoint_override": endpoint, "scheme": endpoint.split("://")[0]} if endpoint else {}
    if lake.region_name:
        kwargs["region"] = lake.region_name
    if lake.aws_access_key_id:
        kwargs.update(access_key=lake.aws_access_key_id, secret_key=lake.aws_secret_access_key,
                      session_token=lake.aws_session_token)
    return S3ArrowFS(S3FileSystem(**kwargs))


def _quote(uri: str) -> str:
    return "'" + uri.replace("'", "''") + "'"


def connect(lake: LakeResource, con: duckdb.DuckDBPyConnection | None = None) -> tuple[duckdb.DuckDBPyConnection, dict[str, int]]:
    """A connection with a view per lake table; returns it and {table: part files}."""
    con = con or duckdb.connect()
    if is_s3_uri(lake.root):
        con.register_filesystem(_s3_filesystem(lake))
    counts = {}
    for table in lake_tables(lake):
        kind, parts = table_parts(lake, table)
        if not parts:
            continue
        # Each part's day or version comes from the lake's listing, not from its path (the
        # lake keeps versions in folders of its own).
        column = "lake_day" if kind == "daily" else "lake_version"
        con.register(f"__{table}_files", pa.table({"filename": [u for u, _ in parts], column: [l for _, l in parts]}))
        files = ", ".join(_quote(u) for u, _ in parts)
        con.execute(f'CREATE OR REPLACE VIEW "{table}" AS SELECT t.* EXCLUDE (filename), f."{column}" '
                    f"FROM read_parquet([{files}], union_by_name = true, filename = true) AS t "
                    f'JOIN "__{table}_files" AS f USING (filename)')
        counts[table] = len(parts)
    return con, counts


def lake_resource() -> LakeResource:
    """The lake the SHOPDISTILL_* variables name, with plain values (for use outside a run)."""
    from shopdistill_assets.settings import resolve_roots

    roots = resolve_roots()
    return LakeResource(root=roots.lake, endpoint_url=roots.endpoint_url)
