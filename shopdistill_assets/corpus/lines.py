"""A firehose file as lines: bounded in size while reading, and how the file ended.

The decompressed stream arrives in chunks (resources/firehose.py). A line longer than
MAX_LINE_BYTES is never held: once it passes the limit its bytes are only counted until the
next newline, and it comes out as one `OversizeLine` (its head kept for the ledger). So a
2.5 GB line costs a 2.5 GB read and a few MiB of memory, never a 2.5 GB string.

How a file ends decides what its lines are worth (one rule, documented in the reasons table):
  clean            every line stands;
  truncated_file   the stream stopped inside a gzip member / zstd frame (an interrupted
                   upload): the intact lines stand, and one more unit, the partial last line,
                   is logged with its bytes;
  corrupt_file     the stream failed its integrity check (gzip CRC-32 or length, zstd
                   checksum, undecodable data): bytes decoded before the check are not
                   trusted, so EVERY line of the file goes to the ledger as corrupt_file,
                   plus one unit for the failure itself;
  read_error       the stored bytes could not be read (I/O): the lines before stand.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from shopdistill_assets.corpus.reasons import Reason

MAX_LINE_BYTES = 8 * 1024 * 1024  # a real record is ~13 KB; far longer lines are not parsed
RAW_LINE_LIMIT = 64 * 1024  # bytes of a raw line a ledger row keeps


@dataclass(frozen=True, slots=True)
class OversizeLine:
    """A line over the limit: its length (newline excluded) and its first RAW_LINE_LIMIT bytes."""

    n_bytes: int
    head: bytes


@dataclass(frozen=True, slots=True)
class FileEnd:
    """A file that did not end cleanly: the reason, what went wrong, the partial last line."""

    reason: Reason
    detail: str
    partial: bytes


def end_reason(exc: BaseException) -> Reason:
    """The firehose reader's faults: TruncatedFile is an EOFError, CorruptFile a ValueError."""
    if isinstance(exc, EOFError):
        return Reason.TRUNCATED_FILE
    if isinstance(exc, OSError):
        return Reason.READ_ERROR
    return Reason.CORRUPT_FILE


class LineReader:
    """Iterate the lines (bytes, without "\\n" or trailing "\\r"s) or OversizeLine markers of a
    chunk stream. A fault of the stream ends the iteration and is kept in `end`."""

    def __init__(self, chunks: Iterable[bytes], max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._chunks = chunks
        self._max = max_line_bytes
        self.lines = 0  # lines (or oversize markers) handed out so far
        self.end: FileEnd | None = None

    def __iter__(self) -> Iterator[bytes | OversizeLine]:
        pending = bytearray()  # the start of a line that continues in the next chunk
        skipped = -1  # bytes of an oversize line counted so far; -1 when not skipping
        head = b""
        try:
            for chunk in self._chunks:
                at = 0
                while True:
                    nl = chunk.find(b"\n", at)
                    if nl < 0:
                        break
                    if skipped >= 0:
                        yield self._count(OversizeLine(skipped + nl - at, head))
                        skipped = -1
                    elif pending:
                        pending += memoryview(chunk)[at:nl]
                        yield self._count(self._line(bytes(pending)))
                        pending.clear()
                    else:
                        yield self._count(self._line(chunk[at:nl]))
                    at = nl + 1
                rest = len(chunk) - at
                if skipped >= 0:
                    skipped += rest
                elif rest:
                    pending += memoryview(chunk)[at:]
                    if len(pending) > self._max:
                        skipped, head = len(pending), bytes(pending[:RAW_LINE_LIMIT])
                        pending = bytearray()
        except (EOFError, OSError, ValueError, zlib.error) as exc:
            partial = head if skipped >= 0 else bytes(pending)
            self.end = FileEnd(end_reason(exc), f"{type(exc).__name__}: {str(exc)[:200]} after {self.lines} lines"
                                                f" ({skipped if skipped >= 0 else len(pending)} bytes of a partial line)",
                               partial)
            return
        if skipped >= 0:  # a last line without a newline
            yield self._count(OversizeLine(skipped, head))
        elif pending:
            yield self._count(self._line(bytes(pending)))

    def _count(self, item: bytes | OversizeLine) -> bytes | OversizeLine:
        self.lines += 1
        return item

    def _line(self, line: bytes) -> bytes | OversizeLine:
        line = line.rstrip(b"\r")  # as the old readline-based reader did (it stripped "\r\n")
        return line if len(line) <= self._max else OversizeLine(len(line), line[:RAW_LINE_LIMIT])


def count_units(chunks: Iterable[bytes]) -> int:
    """The units LineReader would hand out for this stream, counted from the newlines alone:
    one per line (an oversize line too), plus one for a stream that did not end cleanly (its
    partial last line belongs to that unit). The conservation check recounts with it: no line
    is sliced out, so the recount costs about the decompression."""
    lines, open_line = 0, False
    try:
        for chunk in chunks:
            if chunk:
                lines += chunk.count(b"\n")
                open_line = not chunk.endswith(b"\n")
    except (EOFError, OSError, ValueError, zlib.error):
        return lines + 1
    return lines + open_line
