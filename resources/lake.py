"""The lake: Parquet tables in a local folder or under `s3://bucket/prefix`.

Layout (DESIGN.md, contract): `LAKE/<asset>/day=YYYY-MM-DD/part-00000.parquet` for daily
assets, `LAKE/<asset>/<version>/{part-00000.parquet, manifest.json}` for snapshots.
Writing a folder replaces it as a whole, atomically for readers, and the same table always
gives the same bytes. Every folder is an immutable version named by a pointer: a symlink on a
local lake (`lake_local`), a pointer object on S3 (`lake_s3`); readers resolve it once.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from dagster import InitResourceContext
from pydantic import Field

from resources import lake_local as local
from resources import lake_s3 as s3
from resources.firehose import validate_day
from resources.lake_local import STAGING_DIR
from resources.s3 import S3Access, is_s3_uri, join_key, list_prefixes, parse_s3_uri

PART_NAME = "part-00000.parquet"
MANIFEST_NAME = "manifest.json"
S3_SCRATCH = "shopdistill-staging"  # under the system temp folder, for an S3 lake's local scratch
READ_ATTEMPTS = 8  # a reader whose version was collected under it starts again this often
UNOWNED_STAGING_AFTER_S = 86400.0  # staging entries that name no owner (older code, other hosts)
# Asset names and snapshot versions become path parts; "=" is excluded so that no version
# can pass for a `day=` folder.
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
_PART = re.compile(r"^part-(\d{5,})\.parquet$")  # part-00000 … part-99999, part-100000 …

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


class LakeReadConflict(RuntimeError):
    """A folder was replaced, and its old version collected, under every attempt to read it."""


T = TypeVar("T")


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
    """Daily tables and versioned snapshots, replaced atomically, written deterministically."""

    root: str = Field(description="local folder or s3://bucket/prefix of the lake")
    retired_grace_s: float = Field(default=600.0, description="seconds a replaced version stays readable "
                                   "for readers that resolved it before the replace")
    abandoned_after_s: float = Field(default=86400.0, description="S3: seconds after which a version no "
                                     "pointer names (its writer died before the swap) is deleted")

    def setup_for_execution(self, context: InitResourceContext) -> None:
        # A run's start: what killed runs left behind goes (never a live writer's scratch).
        log = context.log
        try:
            removed = self._clean_staging() if is_s3_uri(self.root) else self.clean_stale()
        except OSError as exc:
            if log:
                log.warning(f"lake: could not clean stale scratch: {exc}")
            return
        if removed and log:
            log.info(f"lake: removed {len(removed)} stale scratch folders and retired versions")

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
        self._replace_folder(folder, {n: Path(p) for n, p in zip(names, parts)})
        if is_s3_uri(folder):
            for p in parts:
                Path(p).unlink(missing_ok=True)
        return [f"{folder}/{n}" for n in names]

    def scratch_dir(self) -> Path:
        """A fresh local folder for a stage's intermediate files (same filesystem as a local
        lake), named after its owner process so that a killed run's scratch can be cleaned."""
        return local.make_staging(self._staging_root(), "scratch")

    def day_part_files(self, asset: str, day: str, scratch: Path) -> list[Path]:
        """Local paths of the day's current parts, in `scratch` (a folder the caller owns and
        removes, see `scratch_dir`): hard links on a local lake, downloads from S3. Either
        way they stay whole while the day is replaced."""
        folder = self.day_path(asset, day)
        if not Path(scratch).is_dir():
            raise NotADirectoryError(f"scratch folder {scratch} does not exist (see scratch_dir)")

        def fetch(files: list[str]) -> list[Path]:
            parts = _require_parts(files, f"{asset} for day {day}", folder)
            local_paths = [Path(scratch) / f"in-{asset}-{i:05d}.parquet" for i in range(len(parts))]
            for uri, path in zip(parts, local_paths):
                path.unlink(missing_ok=True)
                if is_s3_uri(uri):
                    s3.download(self.s3_client(), *parse_s3_uri(uri), path)
                elif not _hard_link(Path(uri), path):
                    return [Path(p) for p in parts]  # no links here: the version stays for the grace period
            return local_paths

        return self._with_current(folder, fetch)

    def day_part_uris(self, asset: str, day: str) -> list[str]:
        """URIs of the day's current parts inside their immutable version (what a plain tool
        should read for a consistent view; they stay at least `retired_grace_s` after a replace)."""
        folder = self.day_path(asset, day)
        return self._with_current(folder, lambda files: _require_parts(files, f"{asset} for day {day}", folder))

    def read_day_columns(self, asset: str, day: str, columns: list[str]) -> pa.Table:
        """Only some columns of a day (the checks and funnels need ids, not messages)."""
        folder = self.day_path(asset, day)

        def read(files: list[str]) -> pa.Table:
            parts = _require_parts(files, f"{asset} for day {day}", folder)
            tables = [pq.read_table(p if not is_s3_uri(p) else io.BytesIO(self._read_bytes(p)), columns=columns)
                      for p in parts]
            return pa.concat_tables(tables) if len(tables) > 1 else tables[0]

        return self._with_current(folder, read)

    def has_day(self, asset: str, day: str) -> bool:
        return bool(self._with_current(self.day_path(asset, day), _part_uris))

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
        self._replace_folder(folder, {PART_NAME: parquet_bytes(table), MANIFEST_NAME: manifest_bytes(manifest)})
        return folder

    def write_snapshot_file(self, asset: str, version: str, part: Path, manifest: dict[str, Any]) -> str:
        """Like write_snapshot, for a part already written to a local file (large snapshots)."""
        folder = self.snapshot_path(asset, version)
        self._replace_folder(folder, {PART_NAME: Path(part), MANIFEST_NAME: manifest_bytes(manifest)})
        if is_s3_uri(folder):
            Path(part).unlink(missing_ok=True)
        return folder

    def snapshot_version_uri(self, asset: str, version: str) -> str:
        """URI of the immutable folder the snapshot names now: hand this, not `snapshot_path`,
        to a process that lists the folder itself (a training job); it stays readable at least
        `retired_grace_s` after a replace."""
        folder = self.snapshot_path(asset, version)
        files = self._with_current(folder, lambda found: _require_parts(found, f"{asset} {version}", folder))
        return files[0].rsplit("/", 1)[0]

    def snapshot_part_uris(self, asset: str, version: str) -> list[str]:
        """URIs of the snapshot's part files inside its immutable version (as `day_part_uris`)."""
        folder = self.snapshot_path(asset, version)
        return self._with_current(folder, lambda files: _require_parts(files, f"{asset} {version}", folder))

    def read_snapshot(self, asset: str, version: str) -> pl.DataFrame:
        return self._read_parts(self.snapshot_path(asset, version), f"{asset} {version}")

    def read_manifest(self, asset: str, version: str) -> dict[str, Any]:
        folder = self.snapshot_path(asset, version)

        def read(files: list[str]) -> dict[str, Any]:
            found = [f for f in files if f.rsplit("/", 1)[1] == MANIFEST_NAME]
            if not found:
                raise LakePartMissing(f"no manifest for snapshot {asset} {version} at {folder}/{MANIFEST_NAME}")
            return json.loads(self._read_bytes(found[0]))

        return self._with_current(folder, read)

    def list_snapshots(self, asset: str) -> list[str]:
        """Versions of `asset` that have a manifest (complete snapshots), sorted."""
        asset = _checked_name("asset", asset)

        def has_manifest(files: list[str]) -> bool:
            return any(f.rsplit("/", 1)[1] == MANIFEST_NAME for f in files)

        return sorted(name for name in self._child_folders(asset)
                      if _NAME.match(name) and self._with_current(self._uri(asset, name), has_manifest))

    # ---- housekeeping ----------------------------------------------------------------------
    def clean_stale(self, grace_s: float | None = None, abandoned_after_s: float | None = None) -> list[str]:
        """Remove dead writers' scratch and the versions that no pointer names any more, once
        retired longer than `grace_s` (default `retired_grace_s`); returns what went."""
        grace = self.retired_grace_s if grace_s is None else grace_s
        abandoned = self.abandoned_after_s if abandoned_after_s is None else abandoned_after_s
        removed = self._clean_staging()
        if is_s3_uri(self.root):
            bucket, prefix = parse_s3_uri(self.root)
            return removed + s3.collect_everything(self.s3_client(), bucket, prefix, grace, abandoned)
        root = Path(self.root)
        for asset_dir in sorted(root.iterdir()) if root.is_dir() else []:
            if _NAME.match(asset_dir.name) and asset_dir.is_dir() and not asset_dir.is_symlink():
                removed += local.collect_asset(asset_dir, grace)
        return removed

    def _clean_staging(self) -> list[str]:
        return local.clean_staging(self._staging_root(), UNOWNED_STAGING_AFTER_S)

    # ---- storage ---------------------------------------------------------------------------
    def _uri(self, *parts: str) -> str:
        if is_s3_uri(self.root):
            bucket, prefix = parse_s3_uri(self.root)
            return f"s3://{bucket}/{join_key(prefix, *parts)}"
        return str(Path(self.root).joinpath(*parts))

    def _staging_root(self) -> Path:
        if is_s3_uri(self.root):
            return Path(tempfile.gettempdir()) / S3_SCRATCH
        return Path(self.root) / STAGING_DIR

    def _replace_folder(self, folder: str, files: dict[str, bytes | Path]) -> None:
        if is_s3_uri(folder):
            bucket, key = parse_s3_uri(folder)
            asset_key, name = key.rsplit("/", 1)
            s3.commit(self.s3_client(), bucket, asset_key, name, files, self.retired_grace_s, self.abandoned_after_s)
            return
        staging = self._staging_root()
        staged = local.make_staging(staging, "version")
        try:
            local.fill(staged, files)
            local.commit(staging, Path(folder), staged, self.retired_grace_s)
        finally:
            shutil.rmtree(staged, ignore_errors=True)  # gone already unless the commit failed

    def _resolve(self, folder: str) -> tuple[list[str], Any]:
        """URIs of the files the folder names now, and a stamp to compare after reading: None
        for an immutable version, what would change for a plain folder of older code."""
        if is_s3_uri(folder):
            bucket, key = parse_s3_uri(folder)
            asset_key, name = key.rsplit("/", 1)
            keys, immutable = s3.resolve(self.s3_client(), bucket, asset_key, name)
            return [f"s3://{bucket}/{k}" for k in keys], None if immutable else tuple(keys)
        target = local.resolve(Path(folder))
        if target is None:
            return [], None
        files = [str(target / n) for n in sorted(p.name for p in target.iterdir())]
        return files, local.plain_identity(Path(folder))

    def _with_current(self, folder: str, read: Callable[[list[str]], T]) -> T:
        """`read` over the files the folder names, resolved once; again if a replace collected
        them meanwhile (or changed a plain folder under it)."""
        for _ in range(READ_ATTEMPTS):
            try:
                files, stamp = self._resolve(folder)
                result = read(files)
                if stamp is None or self._resolve(folder)[1] == stamp:
                    return result
            except LakePartMissing:
                raise
            except FileNotFoundError:
                continue
        raise LakeReadConflict(f"{folder} was replaced under each of {READ_ATTEMPTS} attempts to read it")

    def _read_parts(self, folder: str, what: str) -> pl.DataFrame:
        def read(files: list[str]) -> pl.DataFrame:
            frames = [pl.read_parquet(io.BytesIO(self._read_bytes(uri)) if is_s3_uri(uri) else uri)
                      for uri in _require_parts(files, what, folder)]
            return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical_relaxed")

        return self._with_current(folder, read)

    def _read_bytes(self, uri: str) -> bytes:
        if not is_s3_uri(uri):
            return Path(uri).read_bytes()
        return s3.read_object(self.s3_client(), *parse_s3_uri(uri))

    def _child_folders(self, asset: str) -> list[str]:
        base = self._uri(asset)
        if not is_s3_uri(base):
            path = Path(base)
            return [p.name for p in path.iterdir() if p.is_dir()] if path.is_dir() else []
        bucket, prefix = parse_s3_uri(base)
        return list_prefixes(self.s3_client(), bucket, prefix + "/")


def _part_uris(files: list[str]) -> list[str]:
    """The part files among `files`, in part order (by number: part-100000 after part-99999)."""
    numbered = [(int(m.group(1)), f) for f in files if (m := _PART.match(f.rsplit("/", 1)[1]))]
    return [f for _, f in sorted(numbered)]


def _require_parts(files: list[str], what: str, folder: str) -> list[str]:
    parts = _part_uris(files)
    if not parts:
        raise LakePartMissing(f"lake has no {what}: nothing at {folder}")
    return parts


def _hard_link(source: Path, link: Path) -> bool:
    """Link `source` at `link`; False where this filesystem (or this pair of folders) cannot."""
    try:
        os.link(source, link)
    except FileNotFoundError:
        raise
    except OSError:
        return False
    return True
