"""The lake: Parquet tables in a local folder or under `s3://bucket/prefix`.

Layout (DESIGN.md, contract): `LAKE/<asset>/day=YYYY-MM-DD/part-00000.parquet` for daily
assets, `LAKE/<asset>/<version>/{part-00000.parquet, manifest.json}` for snapshots.
Writing a folder replaces it as a whole, and the same table always gives the same bytes.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field

from resources.firehose import validate_day
from resources.s3 import S3Access, is_s3_uri, join_key, parse_s3_uri

PART_NAME = "part-00000.parquet"
MANIFEST_NAME = "manifest.json"
STAGING_DIR = ".staging"  # under the local root: same filesystem, so renames are atomic
# Asset names and snapshot versions become path parts; "=" is excluded so that no version
# can pass for a `day=` folder.
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
_PART = re.compile(r"^part-\d{5}\.parquet$")

# Fixed writer options: with no timestamps in Parquet metadata, these make the output a pure
# function of the table (and of the pyarrow version, which is recorded in `created_by`).
PARQUET_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "compression_level": 3,
    "use_dictionary": True,
    "write_statistics": True,
    "version": "2.6",
    "data_page_version": "1.0",
    "row_group_size": 128 * 1024,
}

Table = pa.Table | pl.DataFrame


class LakePartMissing(FileNotFoundError):
    """The requested day or snapshot has not been written to the lake."""


def to_arrow(table: Table) -> pa.Table:
    if isinstance(table, pl.DataFrame):
        return table.to_arrow()
    if isinstance(table, pa.Table):
        return table
    raise TypeError(f"expected a pyarrow.Table or polars.DataFrame, got {type(table).__name__}")


def parquet_bytes(table: Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(to_arrow(table), sink, **PARQUET_OPTIONS)
    return sink.getvalue()


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def _checked_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"invalid lake {kind} {name!r}: letters, digits, _ . - only")
    return name


class LakeResource(S3Access):
    """Daily tables and versioned snapshots, written atomically and deterministically."""

    root: str = Field(description="local folder or s3://bucket/prefix of the lake")

    # ---- paths -----------------------------------------------------------------------------
    def day_path(self, asset: str, day: str) -> str:
        """URI of the day folder (local path or s3://…)."""
        return self._uri(_checked_name("asset", asset), f"day={validate_day(day)}")

    def snapshot_path(self, asset: str, version: str) -> str:
        return self._uri(_checked_name("asset", asset), _checked_name("version", version))

    # ---- daily tables ----------------------------------------------------------------------
    def write_day(self, asset: str, day: str, table: Table) -> str:
        """Replace `asset`'s day folder with one part; returns the part's URI."""
        folder = self.day_path(asset, day)
        self._replace_folder(folder, {PART_NAME: parquet_bytes(table)})
        return f"{folder}/{PART_NAME}"

    def write_day_parts(self, asset: str, day: str, parts: list[Path]) -> list[str]:
        """Replace `asset`'s day folder with already-written Parquet files (in this order, as
        part-00000, part-00001, ...): how large days stream to the lake without holding a
        table in memory. The files are moved (local) or uploaded (S3) and then removed."""
        folder = self.day_path(asset, day)
        names = [f"part-{i:05d}.parquet" for i in range(len(parts))]
        if is_s3_uri(folder):
            self._replace_s3_folder(folder, {n: Path(p).read_bytes() for n, p in zip(names, parts)})
            for p in parts:
                Path(p).unlink(missing_ok=True)
        else:
            self._replace_local_folder(Path(folder), {n: Path(p) for n, p in zip(names, parts)})
        return [f"{folder}/{n}" for n in names]

    def scratch_dir(self) -> Path:
        """A fresh local folder for a stage's intermediate files (same filesystem as a local lake)."""
        base = Path(self.root) / STAGING_DIR if not is_s3_uri(self.root) else Path(tempfile.gettempdir())
        base.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="scratch-", dir=base))

    def day_part_files(self, asset: str, day: str, scratch: Path) -> list[Path]:
        """Local paths of the day's parts. On S3 they are downloaded into `scratch`, a folder
        the caller owns and removes (see `scratch_dir`); a local lake ignores it."""
        parts = self._parts(self.day_path(asset, day))
        if not parts:
            raise LakePartMissing(f"lake has no {asset} for day {day}: nothing at {self.day_path(asset, day)}")
        if not is_s3_uri(self.root):
            return [Path(p) for p in parts]
        local = []
        for i, uri in enumerate(parts):
            path = Path(scratch) / f"in-{asset}-{i:05d}.parquet"
            path.write_bytes(self._read_bytes(uri))
            local.append(path)
        return local

    def read_day_columns(self, asset: str, day: str, columns: list[str]) -> pa.Table:
        """Only some columns of a day (the checks and funnels need ids, not messages)."""
        parts = self._parts(self.day_path(asset, day))
        if not parts:
            raise LakePartMissing(f"lake has no {asset} for day {day}: nothing at {self.day_path(asset, day)}")
        tables = [pq.read_table(p if not is_s3_uri(p) else io.BytesIO(self._read_bytes(p)), columns=columns)
                  for p in parts]
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]

    def has_day(self, asset: str, day: str) -> bool:
        return bool(self._parts(self.day_path(asset, day)))

    def read_day(self, asset: str, day: str) -> pl.DataFrame:
        return self._read_parts(self.day_path(asset, day), f"{asset} for day {day}")

    def list_days(self, asset: str) -> list[str]:
        """Days of `asset` present in the lake, sorted."""
        names = self._child_folders(_checked_name("asset", asset))
        return sorted(n[len("day=") :] for n in names if n.startswith("day="))

    # ---- snapshots -------------------------------------------------------------------------
    def write_snapshot(
        self, asset: str, version: str, table: Table, manifest: dict[str, Any]
    ) -> str:
        """Write `LAKE/<asset>/<version>/` (part + manifest.json); returns the folder URI."""
        folder = self.snapshot_path(asset, version)
        # The manifest goes last (dict order): on S3 its presence marks a complete snapshot.
        files = {PART_NAME: parquet_bytes(table), MANIFEST_NAME: manifest_bytes(manifest)}
        self._replace_folder(folder, files)
        return folder

    def write_snapshot_file(self, asset: str, version: str, part: Path, manifest: dict[str, Any]) -> str:
        """Like write_snapshot, for a part already written to a local file (large snapshots)."""
        folder = self.snapshot_path(asset, version)
        if is_s3_uri(folder):
            self._replace_s3_folder(folder, {PART_NAME: Path(part).read_bytes(), MANIFEST_NAME: manifest_bytes(manifest)})
        else:
            self._replace_local_folder(Path(folder), {PART_NAME: Path(part), MANIFEST_NAME: manifest_bytes(manifest)})
        return folder

    def read_snapshot(self, asset: str, version: str) -> pl.DataFrame:
        return self._read_parts(self.snapshot_path(asset, version), f"{asset} {version}")

    def read_manifest(self, asset: str, version: str) -> dict[str, Any]:
        uri = f"{self.snapshot_path(asset, version)}/{MANIFEST_NAME}"
        try:
            return json.loads(self._read_bytes(uri))
        except FileNotFoundError as exc:
            raise LakePartMissing(f"no manifest for snapshot {asset} {version} at {uri}") from exc

    def list_snapshots(self, asset: str) -> list[str]:
        """Versions of `asset` that have a manifest (complete snapshots), sorted."""
        asset = _checked_name("asset", asset)
        return sorted(
            name
            for name in self._child_folders(asset)
            if _NAME.match(name) and self._exists(f"{self._uri(asset, name)}/{MANIFEST_NAME}")
        )

    # ---- storage ---------------------------------------------------------------------------
    def _uri(self, *parts: str) -> str:
        if is_s3_uri(self.root):
            bucket, prefix = parse_s3_uri(self.root)
            return f"s3://{bucket}/{join_key(prefix, *parts)}"
        return str(Path(self.root).joinpath(*parts))

    def _replace_folder(self, folder: str, files: dict[str, bytes]) -> None:
        if is_s3_uri(folder):
            self._replace_s3_folder(folder, files)
        else:
            self._replace_local_folder(Path(folder), files)

    def _replace_local_folder(self, folder: Path, files: dict[str, bytes | Path]) -> None:
        # Build the whole folder aside, then rename it into place: readers see the old folder
        # or the new one, never a half-written part (between the two renames of a replace the
        # folder is briefly absent; Linux has no portable atomic directory exchange).
        staging_root = Path(self.root) / STAGING_DIR
        staging_root.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=f"{folder.name}-", dir=staging_root))
        for name, data in files.items():
            if isinstance(data, Path):  # already written on this filesystem: move it in
                os.replace(data, staged / name)
                continue
            with open(staged / name, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
        folder.parent.mkdir(parents=True, exist_ok=True)
        retired = staging_root / f"retired-{uuid.uuid4().hex}"
        if folder.exists():
            os.replace(folder, retired)
        os.replace(staged, folder)
        shutil.rmtree(retired, ignore_errors=True)

    def _replace_s3_folder(self, folder: str, files: dict[str, bytes]) -> None:
        # Each PUT replaces its object atomically; stale parts of an older write go after.
        bucket, prefix = parse_s3_uri(folder)
        client = self.s3_client()
        for name, data in files.items():
            client.upload_fileobj(io.BytesIO(data), bucket, f"{prefix}/{name}")
        keep = {f"{prefix}/{name}" for name in files}
        stale = [key for key in self._s3_keys(bucket, prefix + "/") if key not in keep]
        for start in range(0, len(stale), 1000):
            batch = [{"Key": key} for key in stale[start : start + 1000]]
            client.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})

    def _s3_keys(self, bucket: str, prefix: str) -> list[str]:
        paginator = self.s3_client().get_paginator("list_objects_v2")
        pages = paginator.paginate(Bucket=bucket, Prefix=prefix)
        return [obj["Key"] for page in pages for obj in page.get("Contents", [])]

    def _parts(self, folder: str) -> list[str]:
        """URIs of the folder's part files, sorted."""
        if is_s3_uri(folder):
            bucket, prefix = parse_s3_uri(folder)
            keys = self._s3_keys(bucket, prefix + "/")
            names = [k[len(prefix) + 1 :] for k in keys]
        else:
            path = Path(folder)
            names = [p.name for p in path.iterdir()] if path.is_dir() else []
        return [f"{folder}/{n}" for n in sorted(names) if _PART.match(n)]

    def _read_parts(self, folder: str, what: str) -> pl.DataFrame:
        parts = self._parts(folder)
        if not parts:
            raise LakePartMissing(f"lake has no {what}: nothing at {folder}")
        frames = [pl.read_parquet(io.BytesIO(self._read_bytes(uri))) for uri in parts]
        return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical_relaxed")

    def _read_bytes(self, uri: str) -> bytes:
        if not is_s3_uri(uri):
            return Path(uri).read_bytes()
        bucket, key = parse_s3_uri(uri)
        client = self.s3_client()
        try:
            return client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except client.exceptions.NoSuchKey as exc:
            raise FileNotFoundError(uri) from exc

    def _exists(self, uri: str) -> bool:
        if not is_s3_uri(uri):
            return Path(uri).is_file()
        bucket, key = parse_s3_uri(uri)
        return key in self._s3_keys(bucket, key)

    def _child_folders(self, asset: str) -> list[str]:
        base = self._uri(asset)
        if not is_s3_uri(base):
            path = Path(base)
            return [p.name for p in path.iterdir() if p.is_dir()] if path.is_dir() else []
        bucket, prefix = parse_s3_uri(base)
        paginator = self.s3_client().get_paginator("list_objects_v2")
        pages = paginator.paginate(Bucket=bucket, Prefix=prefix + "/", Delimiter="/")
        return [
            cp["Prefix"][len(prefix) + 1 :].rstrip("/")
            for page in pages
            for cp in page.get("CommonPrefixes", [])
        ]
