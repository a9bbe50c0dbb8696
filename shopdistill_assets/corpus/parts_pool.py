"""Run per-part work in a process pool: one task per firehose file or Parquet part."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def run_parts(fn: Callable[..., T], tasks: Sequence[tuple[Any, ...]], workers: int) -> list[T]:
    """`fn(*task)` for every task, results in task order. Forked workers share the parent's
    imports (no re-import cost); one worker, or one task, runs in-process."""
    if workers <= 1 or len(tasks) <= 1:
        return [fn(*task) for task in tasks]
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)),
                             mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(fn, *task) for task in tasks]
        return [f.result() for f in futures]
