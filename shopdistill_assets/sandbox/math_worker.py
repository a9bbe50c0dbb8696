"""`python_execute` in worker processes: a hard deadline and a memory cap.

`safe_math` bounds every operation before it runs; this is the second line of defence. The
expression is evaluated in a child process (`python -I -S safe_math.py`: the standard library
only, no site-packages, no project imports) that is killed when it does not answer within the
deadline, and that cannot allocate past its memory cap. A thread could not give that guarantee:
a long big-integer operation holds the GIL, so nothing else in the process runs meanwhile.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

from shopdistill_assets.sandbox import safe_math
from shopdistill_assets.sandbox.safe_math import MAX_SOURCE, UnsafeExpression

_SCRIPT = str(Path(safe_math.__file__).resolve())


class MathTimeout(Exception):
    """The worker did not answer in time; it was killed."""


class _Worker:
    def __init__(self, memory_bytes: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-I", "-S", _SCRIPT, str(memory_bytes)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.pending = b""

    def ask(self, code: str, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        self.proc.stdin.write(json.dumps({"code": code}).encode() + b"\n")
        self.proc.stdin.flush()
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise MathTimeout(f"no answer within {timeout_s:g} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise OSError("the worker exited")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return json.loads(line)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


class MathWorkers:
    """A small pool of `safe_math` worker processes, started on first use. Thread-safe."""

    def __init__(self, size: int = 2, timeout_s: float = 5.0, memory_mb: int = 256) -> None:
        self.timeout_s = timeout_s
        self.memory_bytes = memory_mb * 1024 * 1024
        self.killed = 0
        self._slots = threading.BoundedSemaphore(max(1, size))
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._closed = False

    def evaluate(self, code: object) -> str:
        """The value of `code` as text; UnsafeExpression when refused, MathTimeout when killed."""
        if not isinstance(code, str) or len(code) > MAX_SOURCE:
            raise UnsafeExpression("expression missing or too long")
        if not self._slots.acquire(timeout=self.timeout_s):
            raise MathTimeout(f"no free worker within {self.timeout_s:g} s")
        try:
            answer = self._ask(code)
        finally:
            self._slots.release()
        if answer.get("ok") and isinstance(answer.get("value"), str):
            return answer["value"]
        raise UnsafeExpression(str(answer.get("error") or "refused")[:200])

    def _ask(self, code: str) -> dict:
        with self._lock:
            if self._closed:
                raise UnsafeExpression("python_execute is closed")
            worker = self._idle.pop() if self._idle else None
        if worker is None or worker.proc.poll() is not None:
            worker = _Worker(self.memory_bytes)
        try:
            answer = worker.ask(code, self.timeout_s)
        except MathTimeout:
            worker.kill()
            with self._lock:
                self.killed += 1
            raise
        except (OSError, ValueError):
            worker.kill()
            raise UnsafeExpression("the arithmetic worker failed") from None
        with self._lock:
            if self._closed:
                worker.kill()
            else:
                self._idle.append(worker)
        return answer

    def pids(self) -> list[int]:
        with self._lock:
            return sorted(w.proc.pid for w in self._idle if w.proc.poll() is None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()

    def __enter__(self) -> MathWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
