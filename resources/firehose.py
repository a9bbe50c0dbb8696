"""The SN15 firehose: `<root>/day=YYYY-MM-DD/*.jsonl.gz|*.jsonl|*.jsonl.zst`, a folder or S3.

See contracts/sn15-firehose.md, section 1. This resource only lists, hashes and opens day
files and decompresses them in bounded chunks; it never parses a record (that is core's job,
on hostile content).

Integrity: a gzip member's CRC-32 and length and a zstd frame's checksum (when the frame has
one) are checked as the stream is read. A stream that fails them raises `CorruptFile` at the
end of the bad member or frame, after the bytes decoded before it have been delivered; a
stream that stops inside a member or frame raises `TruncatedFile`. What that means for the
lines already read is the caller's rule (corpus/lines.py: a corrupt file is not trusted at all,
a truncated one keeps its intact lines).

File names: a local name that is not valid UTF-8 is listed under `safe_file_name(name)`, a
printable form that no real name can take (it holds a "/"); the file is opened through the
path the listing found, never through a path built from a name.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import zstandard
from pydantic import Field

from resources.s3 import S3Access, is_s3_uri, join_key, list_objects, parse_s3_uri

# Longest suffix first: ".jsonl" must not claim "x.jsonl.gz".
COMPRESSION_BY_SUFFIX = ((".jsonl.gz", "gzip"), (".jsonl.zst", "zstd"), (".jsonl", "none"))
_CHUNK = 1 << 20  # decompressed bytes handed out at a time (at most)
_STORED_READ = 256 * 1024  # stored bytes read at a time
# zstd has no output bound per call: a few input bytes can stand for a 128 KiB block, so input
# goes in small slices, which bounds one call's output at ~32 MiB even for a decompression bomb.
_ZSTD_SLICE = 1024
UNSAFE_NAME_MARK = "non-utf8/"  # no listed name holds a "/": a marked name cannot collide


class StoredDigest:
    """sha256 of a file's stored bytes, fed while the file is read (see `day_file_chunks`);
    `complete` once every stored byte went through it."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self.complete = False

    def update(self, data: bytes) -> None:
        self._sha.update(data)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


class CorruptFile(ValueError):
    """The stored bytes fail their integrity check (gzip CRC/length, zstd checksum, bad data)."""


class TruncatedFile(EOFError):
    """The compressed stream ends inside a gzip member or a zstd frame."""


class FirehoseDayMissing(LookupError):
    """No day file under `<root>/day=<day>/`."""


@dataclass(frozen=True)
class FirehoseFile:
    name: str  # relative to the day folder, e.g. "part-0001.jsonl.gz" (see safe_file_name)
    uri: str  # absolute local path or s3://bucket/key, printable
    size_bytes: int  # stored (compressed) size
    # The path the listing found, when `uri` had to be made printable: opening uses this.
    local_path: str | None = field(default=None, compare=False, repr=False)

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


def safe_file_name(name: str) -> str:
    """`name` itself when it is valid UTF-8; otherwise UNSAFE_NAME_MARK + its bytes with the
    invalid ones written as \\xNN. Local names arrive from the OS with such bytes as lone
    surrogates, which no Parquet or Arrow string can hold."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return UNSAFE_NAME_MARK + os.fsencode(name).decode("utf-8", "backslashreplace")


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

        A truncated file raises TruncatedFile (an EOFError) and a corrupt one CorruptFile (a
        ValueError) after the bytes decoded before the fault have been delivered: the caller
        decides what a broken tail means, nothing is swallowed here. Lines are unbounded here;
        the corpus path reads `day_file_chunks` through corpus/lines.py, which bounds them.
        """
        return io.BufferedReader(_ChunkStream(self.day_file_chunks(file)), _CHUNK)

    def day_file_chunks(self, file: FirehoseFile, digest: StoredDigest | None = None) -> Iterator[bytes]:
        """The file's decompressed bytes in chunks of at most ~1 MiB (32 MiB for zstd), read as
        they go. `digest`, when given, is fed the STORED bytes as they are read (and the rest of
        them when decompression stops early), so a reader checks them against an inventoried
        sha256 without a second read that could see other bytes."""
        with self._open_stored(file) as stored:
            source = _stored_chunks(stored, digest)
            try:
                yield from decompressed_chunks(source, file.compression)
            finally:
                if digest is not None:
                    try:
                        for _ in source:  # a corrupt file stops early: hash what is left of it
                            pass
                    except (OSError, ValueError):
                        pass  # digest.complete stays False: an I/O fault is not a changed file

    def file_sha256(self, file: FirehoseFile) -> str:
        """Hex sha256 of the stored (compressed) bytes, computed streaming."""
        digest = hashlib.sha256()
        with self._open_stored(file) as stored:
            while chunk := stored.read(_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def _open_stored(self, file: FirehoseFile) -> BinaryIO:
        if file.local_path is not None:
            return open(file.local_path, "rb")
        if is_s3_uri(file.uri):
            bucket, key = parse_s3_uri(file.uri)
            # get_object's Body is a socket-backed stream: big objects are never held whole.
            return self.s3_client().get_object(Bucket=bucket, Key=key)["Body"]
        return open(file.uri, "rb")

    def _list_local(self, day: str) -> list[FirehoseFile]:
        folder = Path(self.day_uri(day))
        if not folder.is_dir():
            return []
        files = []
        for p in folder.iterdir():
            if not (p.is_file() and is_day_file(p.name)):
                continue
            path = str(p.resolve())
            printable = safe_file_name(path) == path
            files.append(FirehoseFile(name=safe_file_name(p.name),
                                      uri=path if printable else os.fsencode(path).decode("utf-8", "backslashreplace"),
                                      size_bytes=p.stat().st_size, local_path=None if printable else path))
        return files

    def _list_s3(self, day: str) -> list[FirehoseFile]:
        bucket, prefix = parse_s3_uri(self.root)
        day_prefix = join_key(prefix, f"day={day}") + "/"
        files = []
        for obj in list_objects(self.s3_client(), bucket, day_prefix):
            name = obj["Key"][len(day_prefix) :]
            # Only the day folder's own files, as the local glob `day=D/*` would see them.
            if "/" in name or not is_day_file(name):
                continue
            files.append(FirehoseFile(name=name, uri=f"s3://{bucket}/{obj['Key']}", size_bytes=int(obj["Size"])))
        return files




def _stored_chunks(stored: BinaryIO, digest: StoredDigest | None = None) -> Iterator[bytes]:
    while chunk := stored.read(_STORED_READ):
        if digest is not None:
            digest.update(chunk)
        yield chunk
    if digest is not None:
        digest.complete = True


def decompressed_chunks(stored: Iterator[bytes], compression: str) -> Iterator[bytes]:
    """Stored chunks -> decompressed chunks, integrity-checked (see the module doc)."""
    if compression == "gzip":
        return _gunzip(stored)
    if compression == "zstd":
        return _unzstd(stored)
    if compression == "none":
        return stored
    raise ValueError(f"unknown compression {compression!r}")


_GZIP_FLAGS = {"text": 1, "hcrc": 2, "extra": 4, "name": 8, "comment": 16}


def _gzip_header_length(buf: bytes | bytearray) -> int | None:
    """Bytes of the gzip member header at the start of `buf`; None while it is incomplete."""
    if len(buf) >= 2 and buf[:2] != b"\x1f\x8b" or len(buf) >= 3 and buf[2] != 8:
        raise CorruptFile("gzip: not a gzip member (bad magic or method)")
    if len(buf) < 10:
        return None
    flags, at = buf[3], 10
    if flags & _GZIP_FLAGS["extra"]:
        if len(buf) < at + 2:
            return None
        at += 2 + int.from_bytes(buf[at:at + 2], "little")
    for flag in ("name", "comment"):
        if flags & _GZIP_FLAGS[flag]:
            end = buf.find(b"\0", at)
            if end < 0:
                return None
            at = end + 1
    if flags & _GZIP_FLAGS["hcrc"]:
        at += 2
    return at if len(buf) >= at else None


def _gunzip(stored: Iterator[bytes]) -> Iterator[bytes]:
    """Concatenated gzip members. Each member is inflated raw and its CRC-32 and length are
    checked here, after its bytes have been handed out: zlib's own gzip mode drops the output
    of the call that fails the check, which for a small file is the whole file, and the ledger
    must see every line that decoded (corpus/lines.py: corrupt_file)."""
    chunks, buf = iter(stored), bytearray()
    while True:
        while True:  # the next member's header, past any zero padding
            buf = bytearray(buf.lstrip(b"\0"))
            header = _gzip_header_length(buf) if buf else None
            if header is not None:
                break
            more = next(chunks, None)
            if more is None:
                if buf:
                    raise TruncatedFile("gzip stream ended inside a member header (truncated file)")
                return
            buf += more
        yield from _inflate_member(bytes(buf[header:]), chunks, buf)


def _inflate_member(data: bytes, chunks: Iterator[bytes], rest: bytearray) -> Iterator[bytes]:
    """One member's deflate data and trailer; what follows the member is left in `rest`."""
    inflater, crc, size = zlib.decompressobj(wbits=-15), 0, 0
    while True:
        try:
            out = inflater.decompress(data, _CHUNK)
            while True:  # bounded output: a small member can inflate to gigabytes
                if out:
                    crc, size = zlib.crc32(out, crc), size + len(out)
                    yield out
                if inflater.eof or not inflater.unconsumed_tail and len(out) < _CHUNK:
                    break
                out = inflater.decompress(inflater.unconsumed_tail, _CHUNK)
        except zlib.error as exc:
            raise CorruptFile(f"gzip: {exc}") from None
        if inflater.eof:
            break
        data = next(chunks, None)
        if data is None:
            raise TruncatedFile("gzip stream ended inside a member (truncated file)")
    # What follows the deflate data; with an output cap, zlib may leave it in unconsumed_tail.
    trailer = bytearray(inflater.unused_data or inflater.unconsumed_tail)
    while len(trailer) < 8 and (more := next(chunks, None)) is not None:
        trailer += more
    if len(trailer) < 8:
        raise TruncatedFile("gzip stream ended inside a member trailer (truncated file)")
    if int.from_bytes(trailer[:4], "little") != crc:
        raise CorruptFile(f"gzip: incorrect data check (CRC-32) after {size} decoded bytes")
    if int.from_bytes(trailer[4:8], "little") != size & 0xFFFFFFFF:
        raise CorruptFile(f"gzip: incorrect length check after {size} decoded bytes")
    rest[:] = trailer[8:]


def _unzstd(stored: Iterator[bytes]) -> Iterator[bytes]:
    """Concatenated zstd frames; a frame's checksum, when it has one, is checked."""
    dctx = zstandard.ZstdDecompressor()
    frame, started = dctx.decompressobj(), False
    for data in stored:
        view, at = memoryview(data), 0
        while at < len(view):
            piece = view[at : at + _ZSTD_SLICE]
            at += len(piece)
            started = True
            try:
                out = frame.decompress(piece)
            except zstandard.ZstdError as exc:
                raise CorruptFile(f"zstd: {exc}") from None
            if out:
                yield out
            if frame.eof:
                # The rest of this slice belongs to the next frame: hand it back to the loop.
                rest = len(frame.unused_data)
                at -= rest
                frame, started = dctx.decompressobj(), False
    if started:
        raise TruncatedFile("zstd stream ended inside a frame (truncated file)")


class _ChunkStream(io.RawIOBase):
    """Raw-stream face for a chunk iterator, so io.BufferedReader gives line iteration."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = b""
        self._offset = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._offset >= len(self._pending):
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending, self._offset = chunk, 0
        n = min(len(buffer), len(self._pending) - self._offset)
        buffer[:n] = self._pending[self._offset : self._offset + n]
        self._offset += n
        return n

    def close(self) -> None:
        if not self.closed:
            close = getattr(self._chunks, "close", None)
            if close is not None:
                close()  # a generator: runs its `with`, closing the stored stream
        super().close()
