"""Every misuse of the command line gets one clear line on stderr and a non-zero exit.

Each case runs `shopdistill` as a user does: a separate process, reading only its output.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import boto3
import pytest

from shopdistill_assets.core.days import last_complete_day

CLI = str(Path(sys.executable).with_name("shopdistill"))


def run_cli(args: list[str], home: Path, extra_env: dict | None = None, timeout: int = 240):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPDISTILL_") and k != "DAGSTER_HOME"}
    env.update(SHOPDISTILL_HOME=str(home), **(extra_env or {}))
    return subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=timeout)


def one_error_line(proc, command: str) -> str:
    """The process failed with exactly one stderr line naming the command, and no traceback."""
    assert proc.returncode != 0, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"shopdistill {command}: error: "), lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    return lines[0]


@pytest.mark.parametrize("day, words", [
    ("2026-10-31", ["before the first partition 2026-11-01", "SHOPDISTILL_START_DATE"]),
    ((last_complete_day() + timedelta(days=1)).isoformat(),  # today, UTC
     ["has not ended yet", f"last complete day is {last_complete_day()}"]),
    ("2026-13-01", ["not a calendar date"]),
    ("11/01/2026", ["YYYY-MM-DD"]),
])
def test_a_bad_day_is_refused_before_any_work(tmp_path, day, words):
    proc = run_cli(["corpus", "--firehose", str(tmp_path / "fh"), "--lake", str(tmp_path / "lake"),
                    "--day", "2026-11-02", "--day", day], tmp_path / "home")
    line = one_error_line(proc, "corpus")
    assert all(w in line for w in words), line
    assert not (tmp_path / "lake").exists() and not (tmp_path / "home" / "dagster").exists()


def test_a_failed_day_is_one_line_and_the_other_days_still_get_their_funnel(tiny_day, tmp_path):
    missing = "2026-11-29"
    proc = run_cli(["corpus", "--firehose", str(tiny_day.root), "--lake", str(tmp_path / "lake"),
                    "--day", missing, "--day", tiny_day.day], tmp_path / "home")
    line = one_error_line(proc, "corpus")
    assert f"1 of 2 days failed: {missing}" in line
    rows = {r.split()[0]: r for r in proc.stdout.splitlines() if r[:4].isdigit() and " leak: " not in r}
    assert rows[missing].split()[1] == "FAILED:" and f"no firehose files for day {missing}" in rows[missing]
    assert rows[tiny_day.day].split()[-1] == "ok", proc.stdout
    assert len(proc.stdout.splitlines()) < 12  # no stack trace in the funnel either


def test_an_s3_failure_shows_its_cause(tiny_day, moto_s3, tmp_path):
    boto3.client("s3", endpoint_url=moto_s3).create_bucket(Bucket="present")
    proc = run_cli(["corpus", "--firehose", str(tiny_day.root), "--lake", "s3://absent-bucket/lake",
                    "--endpoint-url", moto_s3, "--day", tiny_day.day], tmp_path / "home")
    one_error_line(proc, "corpus")
    (row,) = [r for r in proc.stdout.splitlines() if "FAILED" in r]
    assert "NoSuchBucket" in row, row
    assert len(proc.stdout.splitlines()) < 8


def test_serve_on_a_port_in_use(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = run_cli(["serve", "--policy", "random", "--port", str(port)], tmp_path / "home", timeout=60)
    assert f"port {port} on 127.0.0.1 is already in use" in one_error_line(proc, "serve")


def test_serve_a_missing_checkpoint(tmp_path):
    proc = run_cli(["serve", str(tmp_path / "no-such-checkpoint")], tmp_path / "home", timeout=60)
    assert "no checkpoint at" in one_error_line(proc, "serve")


def test_serve_the_oracle_without_an_arena(tmp_path):
    proc = run_cli(["serve", "--policy", "oracle"], tmp_path / "home", timeout=60)
    line = one_error_line(proc, "serve")
    assert "--suites" in line and "shopdistill simulate" in line


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    from shopdistill_assets.eval.toy_world import toy_world
    from shopdistill_assets.sandbox import write_catalog, write_suite

    root = tmp_path_factory.mktemp("toy")
    catalog, problems = toy_world(seed=3, n_problems=3)
    write_catalog(catalog, root / "catalog" / "documents.jsonl.gz")
    write_suite(problems, root / "suites" / "toy.json")
    return root


def test_eval_against_a_dead_endpoint_fails(toy, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    proc = run_cli(["eval", "--endpoint", f"http://127.0.0.1:{port}/v1", "--model", "m", "--samples", "1",
                    "--heldout", str(toy / "suites"), "--catalog", str(toy / "catalog"), "--timeout", "2"],
                   tmp_path / "home", timeout=120)
    line = one_error_line(proc, "eval")
    assert "every one of 3 episodes failed at the endpoint" in line


def test_eval_without_a_heldout_snapshot_points_to_snapshot(toy, tmp_path):
    proc = run_cli(["eval", "--endpoint", "http://127.0.0.1:9/v1", "--model", "m", "--catalog", str(toy / "catalog")],
                   tmp_path / "home", timeout=60)
    assert "run `shopdistill snapshot`" in one_error_line(proc, "eval")


def test_verbose_shows_the_traceback(tmp_path):
    proc = run_cli(["--verbose", "serve", str(tmp_path / "nothing")], tmp_path / "home", timeout=60)
    assert proc.returncode == 1 and "Traceback" in proc.stderr
