"""The SN15 firehose: `<root>/day=YYYY-MM-DD/*.jsonl.gz|*.jsonl|*.jsonl.zst`, a folder or S3.

See contracts/sn15-firehose.md, section 1. This resource only lists, hashes and opens day
files; it never parses a record (that is core/normalize's job, on hostile content).
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import zstandard
from pydantic import Field

from resources.s3 import S3Access, is_s3_uri, join_key, parse_s3_uri

# Longest suffix first: ".jsonl" must not claim "x.jsonl.gz".
COMPRESSION_BY_SUFFIX = ((".jsonl.gz", "gzip"), (".jsonl.zst", "zstd"), (".jsonl", "none"))
_CHUNK = 1 << 20


class FirehoseDayMissing(LookupError):
    """No day file under `<root>/day=<day>/`."""


@dataclass(frozen=True)
class FirehoseFile:
    name: str  # relative to the day folder, e.g. "part-0001.jsonl.gz"
    uri: str  # absolute local path or s3://bucket/key
    size_bytes: int  # stored (compressed) size

    @property
    def compression(self) -> str:
        compression = compression_of(self.name)
        assert compression is not None  # listing only yields recognised names
        return compression


def compression_of(name: str) -> str | None:
    """"gzip" | "zstd" | "none" for a day file name, None for a name that is not a day file."""
    for suffix, compression in COMPRESSION_BY_SUFFIX:
        if name.endswith(suffix) and len(name) > len(suffix):
            return compression
    return None


def is_day_file(name: str) -> bool:
    # Hidden names are uploads in progress (or editor droppings), never day files.
    return not name.startswith(".") and compression_of(name) is not None


def validate_day(day: str) -> str:
    """The partition key must be a real YYYY-MM-DD date: it becomes part of a path."""
    try:
        parsed = dt.date.fromisoformat(day)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"day must be YYYY-MM-DD, got {day!r}") from exc
    if parsed.isoformat() != day:
        raise ValueError(f"day must be YYYY-MM-DD, got {day!r}")
    return day


class FirehoseResource(S3Access):
    """Read-only access to firehose days in a local folder or under `s3://bucket/prefix`."""

    root: str = Field(description="local folder or s3://bucket/prefix holding day=YYYY-MM-DD/")

    def day_uri(self, day: str) -> str:
        validate_day(day)
        if is_s3_uri(self.root):
            bucket, prefix = parse_s3_uri(self.root)
            return f"s3://{bucket}/{join_key(prefix, f'day={day}')}/"
        return str(Path(self.root) / f"day={day}")

    def list_day(self, day: str) -> list[FirehoseFile]:
        """The day's files, sorted by name; raises FirehoseDayMissing when there are none."""
        validate_day(day)
        files = self._list_s3(day) if is_s3_uri(self.root) else self._list_local(day)
        if not files:
            raise FirehoseDayMissing(
                f"no firehose files for day {day} under {self.day_uri(day)} "
                f"(firehose root {self.root!r}; expected *.jsonl.gz, *.jsonl or *.jsonl.zst)"
            )
        return sorted(files, key=lambda f: f.name)

    def open_day_file(self, file: FirehoseFile) -> io.BufferedReader:
        """A line-iterable stream of the file's DECOMPRESSED bytes, read as it goes.

        A truncated gzip member or zstd frame raises EOFError after the intact bytes have been
        delivered (gzip.BadGzipFile / zstandard.ZstdError for corrupt data): the caller
        decides what a broken tail means, nothing is swallowed here.
        """
        return decompressing_reader(self._open_stored(file), file.compression)

    def file_sha256(self, file: FirehoseFile) -> str:
        """Hex sha256 of the stored (compressed) bytes, computed streaming."""
        digest = hashlib.sha256()
        with self._open_stored(file) as stored:
            while chunk := stored.read(_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def _open_stored(self, file: FirehoseFile) -> BinaryIO:
        if is_s3_uri(file.uri):
            bucket, key = parse_s3_uri(file.uri)
            # get_object's Body is a socket-backed stream: big objects are never held whole.
            return self.s3_client().get_object(Bucket=bucket, Key=key)["Body"]
        return open(file.uri, "rb")

    def _list_local(self, day: str) -> list[FirehoseFile]:
        folder = Path(self.day_uri(day))
        if not folder.is_dir():
            return []
        return [
            FirehoseFile(name=p.name, uri=str(p.resolve()), size_bytes=p.stat().st_size)
            for p in folder.iterdir()
            if p.is_file() and is_day_file(p.name)
        ]

    def _list_s3(self, day: str) -> list[FirehoseFile]:
        bucket, prefix = parse_s3_uri(self.root)
        day_prefix = join_key(prefix, f"day={day}") + "/"
        paginator = self.s3_client().get_paginator("list_objects_v2")
        files = []
        for page in paginator.paginate(Bucket=bucket, Prefix=day_prefix):
            for obj in page.get("Contents", []):
                name = obj["Key"][len(day_prefix) :]
                # Only the day folder's own files, as the local glob `day=D/*` would see them.
                if "/" in name or not is_day_file(name):
                    continue
                uri = f"s3://{bucket}/{obj['Key']}"
                files.append(FirehoseFile(name=name, uri=uri, size_bytes=int(obj["Size"])))
        return files


def decompressing_reader(stored: BinaryIO, compression: str) -> io.BufferedReader:
    """Wrap a stored-bytes stream; closing the result closes `stored`."""
    if compression == "gzip":
        # GzipFile leaves a fileobj it was given open: the adapter closes both.
        source: Any = gzip.GzipFile(fileobj=stored, mode="rb")
        return io.BufferedReader(_ReadIntoAdapter(source, also_close=stored), _CHUNK)
    if compression == "zstd":
        return io.BufferedReader(_ZstdFrames(stored), _CHUNK)
    if compression == "none":
        return io.BufferedReader(_ReadIntoAdapter(stored), _CHUNK)
    raise ValueError(f"unknown compression {compression!r}")


class _ReadIntoAdapter(io.RawIOBase):
    """Raw-stream face for anything with read(n), so io.BufferedReader gives readline and
    line iteration (botocore's StreamingBody iterates in fixed chunks, not lines)."""

    def __init__(self, source: Any, also_close: Any = None) -> None:
        self._source = source
        self._also_close = also_close
        # read1 returns what one underlying read gave: a GzipFile's read(n) keeps reading to
        # fill n, and drops the bytes it had when a truncated member raises EOFError.
        self._read = getattr(source, "read1", source.read)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            try:
                self._source.close()
            finally:
                if self._also_close is not None:
                    self._also_close.close()
        super().close()


class _ZstdFrames(io.RawIOBase):
    """Concatenated zstd frames, decompressed as read.

    zstandard's own stream_reader ends a truncated frame with a silent short read; this one
    raises EOFError instead, like gzip does.
    """

    def __init__(self, stored: BinaryIO) -> None:
        self._stored = stored
        self._dctx = zstandard.ZstdDecompressor()
        self._frame = self._dctx.decompressobj()
        self._in_frame = False
        self._pending = b""
        self._offset = 0
        self._exhausted = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._offset >= len(self._pending) and not self._exhausted:
            self._refill()
        n = min(len(buffer), len(self._pending) - self._offset)
        buffer[:n] = self._pending[self._offset : self._offset + n]
        self._offset += n
        return n

    def _refill(self) -> None:
        compressed = self._stored.read(_CHUNK // 4)
        if not compressed:
            self._exhausted = True
            if self._in_frame:
                raise EOFError("zstd stream ended before the end of its frame (truncated file)")
            return
        out = []
        while compressed:
            self._in_frame = True
            out.append(self._frame.decompress(compressed))
            if not self._frame.eof:
                break
            # A frame ended inside this chunk; the rest belongs to the next frame.
            compressed = self._frame.unused_data
            self._frame = self._dctx.decompressobj()
            self._in_frame = False
        self._pending, self._offset = b"".join(out), 0

    def close(self) -> None:
        if not self.closed:
            self._stored.close()
        super().close()
