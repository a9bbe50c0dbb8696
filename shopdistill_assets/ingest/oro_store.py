"""Where the oro_api source writes: a local folder or an s3:// prefix, each object whole.

Local writes go to a hidden temporary name in the same folder and are renamed into place, so a
reader (raw_firehose, the firehose sensor) sees the old object or the new one, never half of
one; hidden names are never day files. An S3 PUT is atomic by itself. A day file is streamed
(`write_stream_if_changed`): it is never held in memory whole. Keys are built by this
project from ids the SDK parsed as UUIDs and from dates: never from miner content.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from resources.s3 import is_s3_uri, join_key, list_objects, make_s3_client, parse_s3_uri


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

    def write_stream_if_changed(self, key: str, chunks: Iterable[bytes]) -> tuple[str, bool]:
        """Write the chunks as one object unless it already holds exactly these bytes (its
        mtime / ETag then stays, so the firehose sensor sees no change); (sha256, written).
        On S3 the sha256 rides on the object as metadata, which is what is compared."""
        if self._s3:
            with tempfile.TemporaryFile() as staged:
                digest = _copy_hashing(chunks, staged)
                if self._s3_sha256(key) == digest:
                    return digest, False
                staged.seek(0)
                self._client.upload_fileobj(staged, self._bucket, join_key(self._prefix, key),
                                            ExtraArgs={"Metadata": {"sha256": digest}})
            return digest, True
        path = Path(self.root) / key
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                digest = _copy_hashing(chunks, out)
                out.flush()
                os.fsync(out.fileno())
            if path.is_file() and _file_sha256(path) == digest:
                Path(tmp).unlink()
                return digest, False
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return digest, True

    def _s3_sha256(self, key: str) -> str | None:
        try:
            head = self._client.head_object(Bucket=self._bucket, Key=join_key(self._prefix, key))
        except self._client.exceptions.ClientError:
            return None
        return head.get("Metadata", {}).get("sha256")

    def list(self, prefix: str) -> list[str]:
        """Keys under `prefix` (relative to the root), sorted; hidden names left out."""
        if self._s3:
            base = join_key(self._prefix, prefix)
            skip = len(self._prefix) + 1 if self._prefix else 0
            keys = [obj["Key"][skip:] for obj in list_objects(self._client, self._bucket, base + "/")]
        else:
            folder = Path(self.root) / prefix
            keys = [str(p.relative_to(self.root)) for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
        return sorted(k for k in keys if not Path(k).name.startswith("."))


def _copy_hashing(chunks: Iterable[bytes], out: BinaryIO) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
        out.write(chunk)
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stored:
        for block in iter(lambda: stored.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
