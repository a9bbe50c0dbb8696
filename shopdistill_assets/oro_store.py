"""Where the oro_api source writes: a local folder or an s3:// prefix, each object whole.

Local writes go to a hidden temporary name in the same folder and are renamed into place, so a
reader (raw_firehose, the firehose sensor) sees the old object or the new one, never half of
one; hidden names are never day files. An S3 PUT is atomic by itself. Keys are built by this
project from ids the SDK parsed as UUIDs and from dates: never from miner content.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from resources.s3 import is_s3_uri, join_key, make_s3_client, parse_s3_uri


class Store:
    def __init__(self, root: str, endpoint_url: str | None = None, s3_client: Any = None) -> None:
        self.root = root
        self._s3 = is_s3_uri(root)
        if self._s3:
            self._bucket, self._prefix = parse_s3_uri(root)
            self._client = s3_client or make_s3_client(endpoint_url=endpoint_url)

    def uri(self, key: str) -> str:
        if self._s3:
            return f"s3://{self._bucket}/{join_key(self._prefix, key)}"
        return str(Path(self.root) / key)

    def read(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is none."""
        if self._s3:
            try:
                return self._client.get_object(Bucket=self._bucket, Key=join_key(self._prefix, key))["Body"].read()
            except self._client.exceptions.NoSuchKey:
                return None
        path = Path(self.root) / key
        return path.read_bytes() if path.is_file() else None

    def write(self, key: str, data: bytes) -> None:
        if self._s3:
            self._client.put_object(Bucket=self._bucket, Key=join_key(self._prefix, key), Body=data)
            return
        path = Path(self.root) / key
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def write_if_changed(self, key: str, data: bytes) -> bool:
        """Write unless the object already holds exactly these bytes (its mtime / ETag then
        stays, so the firehose sensor sees no change). True when written."""
        if self.read(key) == data:
            return False
        self.write(key, data)
        return True

    def list(self, prefix: str) -> list[str]:
        """Keys under `prefix` (relative to the root), sorted; hidden names left out."""
        if self._s3:
            base = join_key(self._prefix, prefix)
            pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=base + "/")
            skip = len(self._prefix) + 1 if self._prefix else 0
            keys = [obj["Key"][skip:] for page in pages for obj in page.get("Contents", [])]
        else:
            folder = Path(self.root) / prefix
            keys = [str(p.relative_to(self.root)) for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
        return sorted(k for k in keys if not Path(k).name.startswith("."))
