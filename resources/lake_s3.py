"""An S3 lake's folders: immutable versions named by a pointer object written last.

    <prefix>/<asset>/day=YYYY-MM-DD/_current.json                 {"version": id, "files": [...]}
    <prefix>/<asset>/.versions/day=YYYY-MM-DD/<version_id>/part-00000.parquet …
    <prefix>/<asset>/.versions/day=YYYY-MM-DD/<version_id>/_retired   when a newer version took over

A writer uploads the whole version, then replaces the pointer with a conditional PUT (If-Match
on the pointer it read, so each replaced version is retired by exactly one writer; the last
complete writer wins). A reader reads the pointer once, then the objects it lists. Retired
versions are deleted after a grace period; versions no pointer ever named (a writer killed
before its pointer PUT) once untouched for a long time, since a live upload looks the same.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from resources.lake_local import VERSIONS_DIR, new_version_id
from resources.s3 import list_objects

POINTER_NAME = "_current.json"
RETIRED_NAME = "_retired"
_CONFLICT = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}
_UNSUPPORTED = {"NotImplemented", "501"}


def folder_keys(asset_key: str, name: str) -> tuple[str, str]:
    """(pointer key, versions prefix ending in '/') of folder `name` under `asset_key`."""
    return f"{asset_key}/{name}/{POINTER_NAME}", f"{asset_key}/{VERSIONS_DIR}/{name}/"


def read_pointer(client: Any, bucket: str, key: str) -> tuple[dict, str] | None:
    """(pointer, etag), or None where the folder has no pointer."""
    try:
        response = client.get_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return None
        raise
    try:
        pointer = json.loads(response["Body"].read())
        if not isinstance(pointer.get("version"), str) or not isinstance(pointer.get("files"), list):
            raise ValueError("no version or files")
    except (ValueError, AttributeError) as exc:
        raise ValueError(f"s3://{bucket}/{key} is not a lake pointer: {exc}") from exc
    return pointer, response["ETag"]


def resolve(client: Any, bucket: str, asset_key: str, name: str) -> tuple[list[str], bool]:
    """(keys of the folder's current files, sorted by name; whether they are an immutable
    version). Without a pointer: the flat objects right under the folder (older code)."""
    pointer_key, versions = folder_keys(asset_key, name)
    found = read_pointer(client, bucket, pointer_key)
    if found is not None:
        pointer = found[0]
        return [f"{versions}{pointer['version']}/{f}" for f in sorted(pointer["files"])], True
    flat = f"{asset_key}/{name}/"
    keys = [o["Key"] for o in list_objects(client, bucket, flat)]
    return sorted(k for k in keys if "/" not in k[len(flat):] and k != pointer_key), False


def commit(client: Any, bucket: str, asset_key: str, name: str, files: dict[str, bytes | Path],
           grace_s: float, abandoned_after_s: float) -> None:
    pointer_key, versions = folder_keys(asset_key, name)
    version_id = new_version_id()
    for file_name, data in files.items():
        key = f"{versions}{version_id}/{file_name}"
        if isinstance(data, Path):
            client.upload_file(str(data), bucket, key)  # multipart for large parts
        else:
            client.put_object(Bucket=bucket, Key=key, Body=data)
    body = json.dumps({"version": version_id, "files": sorted(files)}, sort_keys=True).encode()
    previous = _swap_pointer(client, bucket, pointer_key, body)
    if previous:
        client.put_object(Bucket=bucket, Key=f"{versions}{previous}/{RETIRED_NAME}", Body=b"")
    flat = f"{asset_key}/{name}/"  # older code wrote parts here; readers now follow the pointer
    _delete(client, bucket, [o["Key"] for o in list_objects(client, bucket, flat)
                             if "/" not in o["Key"][len(flat):] and o["Key"] != pointer_key])
    collect(client, bucket, asset_key, name, grace_s, abandoned_after_s)


def _swap_pointer(client: Any, bucket: str, key: str, body: bytes) -> str | None:
    """PUT the pointer only over the one we read; returns the version it replaced."""
    for _ in range(50):
        found = read_pointer(client, bucket, key)
        condition = {"IfMatch": found[1]} if found else {"IfNoneMatch": "*"}
        try:
            client.put_object(Bucket=bucket, Key=key, Body=body, **condition)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code"))
            if code in _CONFLICT:
                continue  # another writer swapped in between: retire theirs instead
            if code not in _UNSUPPORTED:
                raise
            client.put_object(Bucket=bucket, Key=key, Body=body)  # a store without conditional PUT
        return found[0]["version"] if found else None
    raise RuntimeError(f"s3://{bucket}/{key}: the pointer kept changing under 50 conditional writes")


def collect(client: Any, bucket: str, asset_key: str, name: str, grace_s: float,
            abandoned_after_s: float) -> list[str]:
    """Delete the folder's versions other than the current one: retired ones after `grace_s`,
    never-named ones once their newest object is `abandoned_after_s` old."""
    pointer_key, versions = folder_keys(asset_key, name)
    found = read_pointer(client, bucket, pointer_key)
    current = found[0]["version"] if found else None
    objects: dict[str, list[dict]] = defaultdict(list)
    for obj in list_objects(client, bucket, versions):
        objects[obj["Key"][len(versions):].split("/", 1)[0]].append(obj)
    now, removed = time.time(), []
    for version_id, objs in objects.items():
        if version_id == current:
            continue
        retired = [o["LastModified"].timestamp() for o in objs if o["Key"].endswith(f"/{RETIRED_NAME}")]
        if retired:
            age, limit = now - retired[0], grace_s
        else:
            age, limit = now - max(o["LastModified"].timestamp() for o in objs), abandoned_after_s
        if age >= limit:
            _delete(client, bucket, [o["Key"] for o in objs])
            removed.append(f"s3://{bucket}/{versions}{version_id}")
    return removed


def collect_everything(client: Any, bucket: str, prefix: str, grace_s: float,
                       abandoned_after_s: float) -> list[str]:
    """Collect every folder of every asset under the lake's prefix."""
    removed = []
    base = f"{prefix}/" if prefix else ""
    folders = set()
    for obj in list_objects(client, bucket, base):
        parts = obj["Key"][len(base):].split("/")
        if len(parts) >= 4 and parts[1] == VERSIONS_DIR:
            folders.add((parts[0], parts[2]))
    for asset, name in sorted(folders):
        removed += collect(client, bucket, f"{base}{asset}", name, grace_s, abandoned_after_s)
    return removed


def _delete(client: Any, bucket: str, keys: list[str]) -> None:
    for start in range(0, len(keys), 1000):
        batch = [{"Key": key} for key in keys[start : start + 1000]]
        client.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})


def read_object(client: Any, bucket: str, key: str) -> bytes:
    try:
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            raise FileNotFoundError(f"s3://{bucket}/{key}") from exc
        raise


def download(client: Any, bucket: str, key: str, path: Path) -> None:
    try:
        client.download_file(bucket, key, str(path))
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            raise FileNotFoundError(f"s3://{bucket}/{key}") from exc
        raise

