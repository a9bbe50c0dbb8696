"""Progress of long command-line work: a bar with rate and ETA on a terminal, plain lines when not.

On a TTY one line is redrawn every second (`corpus  2/3 days  [#####-----]  0.41 days/s  ETA 2 s
elapsed 5 s`); in a log or pipe a plain line is written at each step and every `every_s` seconds
while a step runs, so a long step (training, evaluation) is never silent. Writes to stderr: the
commands' results (tables, JSON) stay alone on stdout.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes} min {seconds:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


class Progress:
    """`with Progress("corpus", total=3, unit="days") as bar: ... bar.advance(note="2026-11-01")`.
    total=None: elapsed time only (one step of unknown length)."""

    def __init__(self, label: str, total: int | None = None, unit: str = "steps", stream: TextIO | None = None,
                 every_s: float = 10.0, tty: bool | None = None) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.every_s = every_s
        self.done, self.note = 0, ""
        self._start = self._last_plain = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True, name=f"progress-{label}")

    def __enter__(self) -> Progress:
        self._write(self.line(), final=False)
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._ticker.join(timeout=2)
        self._write(self.line(finished=True), final=True)

    def advance(self, n: int = 1, note: str = "") -> None:
        with self._lock:
            self.done += n
            self.note = note
        self._write(self.line(), final=False, step=True)

    def line(self, finished: bool = False) -> str:
        elapsed = time.monotonic() - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        parts = [self.label]
        if self.total:
            filled = int(20 * min(self.done, self.total) / self.total)
            parts += [f"{self.done}/{self.total} {self.unit}", "[" + "#" * filled + "-" * (20 - filled) + "]"]
            if self.done and not finished:
                parts.append(f"{rate:.2f} {self.unit}/s  ETA {_duration((self.total - self.done) / rate)}")
            elif self.done:
                parts.append(f"{rate:.2f} {self.unit}/s")
        elif self.done:
            parts.append(f"{self.done} {self.unit}")
        parts.append(("done in " if finished else "elapsed ") + _duration(elapsed))
        if self.note:
            parts.append(f"({self.note})")
        return "  ".join(parts)

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            if self.tty:
                self._write(self.line(), final=False)
            elif time.monotonic() - self._last_plain >= self.every_s:
                self._write(self.line(), final=False, step=True)

    def _write(self, text: str, final: bool, step: bool = False) -> None:
        with self._lock:
            if self.tty:
                self.stream.write("\r\x1b[2K" + text + ("\n" if final else ""))
            elif step or final or self.done == 0 and self._last_plain == self._start:
                self.stream.write(text + "\n")
                self._last_plain = time.monotonic()
            self.stream.flush()
