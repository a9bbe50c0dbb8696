"""Shared fixtures."""

from __future__ import annotations

import gzip
import json
import os
import random
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"


@pytest.fixture(autouse=True)
def _restore_roots():
    """Loading the definitions or running a CLI command in-process writes the SHOPDISTILL_*
    roots into the environment (that is how every process agrees on them); put them back after
    each test so no test inherits another's roots."""
    names = lambda: {k for k in os.environ if k.startswith("SHOPDISTILL_") or k == "DAGSTER_HOME"}
    before = {k: os.environ[k] for k in names()}
    yield
    for k in names() - set(before):
        del os.environ[k]
    os.environ.update(before)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """`../shared` beside the repository; absent in a user's clone, where tests using it skip."""
    if not (SHARED / "data").is_dir():
        pytest.skip("../shared is not present (a user's clone): skipping tests on the shared real data")
    return SHARED


def shoppingbench_queries() -> list[tuple[str, str]]:
    """(file:line, query) of the 900 real ShoppingBench test problems in ../shared; the test
    skips where they are absent."""
    folder = SHARED / "data" / "shoppingbench"
    if not folder.is_dir():
        pytest.skip(f"{folder} absent")
    out = []
    for path in sorted(folder.glob("synthesize_*_test.jsonl")):
        for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
            if line.strip():
                out.append((f"{path.stem}:{n}", json.loads(line)["query"]))
    return out


# ---- firehose days and S3 on loopback (ingest, lake) ---------------------------------------

TINY_DAY = "2026-11-30"  # within the default daily partitions (start 2026-11-01)


@dataclass(frozen=True)
class TinyDay:
    """A firehose root with one day of two files, and what each file holds."""

    root: Path
    day: str
    stored: dict[str, bytes]  # file name -> bytes on disk (compressed for .gz)
    lines: dict[str, list[bytes]]  # file name -> decompressed lines, newline kept

    @property
    def folder(self) -> Path:
        return self.root / f"day={self.day}"


def sample_lines() -> list[bytes]:
    """The seven real-shaped SN15 lines of ../shared/samples (the last one truncated JSON), or
    synthetic ones where ../shared is absent."""
    sample = SHARED / "samples" / "sn15-day.jsonl.gz"
    if sample.is_file():
        return gzip.decompress(sample.read_bytes()).splitlines(keepends=True)
    rng = random.Random(15)
    return [
        json.dumps(
            # ~2 KB of incompressible text per line (a real record is ~13 KB), so a cut file
            # keeps some whole lines and loses others.
            {
                "schema": "sn15.problem_run/v1",
                "eval_run_id": f"run-{i}",
                "query": rng.randbytes(1000).hex(),
            }
        ).encode()
        + b"\n"
        for i in range(7)
    ]


def real_sample_lines() -> list[bytes]:
    """The shared samples' lines, for tests whose expectations are those records' fates (gated,
    sub-task, reasoning gate); such tests skip where ../shared is absent."""
    if not (SHARED / "samples" / "sn15-day.jsonl.gz").is_file():
        pytest.skip("../shared/samples is not present (a user's clone): this test needs the real-shaped records")
    return sample_lines()


@pytest.fixture
def tiny_day(tmp_path: Path) -> TinyDay:
    lines = sample_lines()
    by_file = {"part-000.jsonl.gz": lines[:4], "part-001.jsonl": lines[4:]}
    stored = {
        # mtime=0: the gzip header holds no clock, so the file's sha256 is stable.
        "part-000.jsonl.gz": gzip.compress(b"".join(by_file["part-000.jsonl.gz"]), mtime=0),
        "part-001.jsonl": b"".join(by_file["part-001.jsonl"]),
    }
    day = TinyDay(root=tmp_path / "firehose", day=TINY_DAY, stored=stored, lines=by_file)
    day.folder.mkdir(parents=True)
    for name, data in stored.items():
        (day.folder / name).write_bytes(data)
    return day


@pytest.fixture
def moto_s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real S3 HTTP endpoint on loopback (moto's server); yields its URL."""
    from moto.server import ThreadedMotoServer

    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    try:
        yield url
    finally:
        # moto keeps its buckets in process-wide state: clear them for the next test.
        urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"))
        server.stop()
