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
    """The process failed with exactly one error line naming the command, last on stderr (after
    any progress lines, which also go to stderr), and no traceback."""
    assert proc.returncode != 0, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    errors = [line for line in lines if ": error: " in line]
    assert errors == lines[-1:], proc.stderr
    assert errors[0].startswith(f"shopdistill {command}: error: "), errors[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    return errors[0]


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


def test_a_missing_day_folder_or_root_is_refused_before_any_run(tiny_day, tmp_path):
    """A CLI mistake must not turn a real day red in the UI: nothing is launched at all."""
    home = tmp_path / "home"
    missing = "2026-11-29"
    proc = run_cli(["corpus", "--firehose", str(tiny_day.root), "--lake", str(tmp_path / "lake"),
                    "--day", missing, "--day", tiny_day.day], home)
    line = one_error_line(proc, "corpus")
    assert f"no firehose files for day {missing} under {tiny_day.root}" in line and "nothing was run" in line
    proc = run_cli(["corpus", "--firehose", str(tmp_path / "no" / "such" / "folder"), "--day", tiny_day.day], home)
    assert f"the firehose root {tmp_path / 'no' / 'such' / 'folder'} is not a folder" in one_error_line(proc, "corpus")
    assert not (home / "dagster").exists() and not (tmp_path / "lake").exists()  # no run, no instance, no lake


def test_snapshot_checks_both_snapshots_inputs_before_writing_either(tiny_day, tmp_path):
    home, lake = tmp_path / "home", tmp_path / "lake"
    ran = run_cli(["corpus", "--firehose", str(tiny_day.root), "--lake", str(lake), "--day", tiny_day.day], home)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    proc = run_cli(["snapshot", "--lake", str(lake), "--suites", str(tmp_path / "no-suites")], home)
    line = one_error_line(proc, "snapshot")
    assert "heldout_eval_set needs suites with ground truth" in line and "no snapshot was written" in line
    proc = run_cli(["snapshot", "--lake", str(lake), "--end-day", "2026-11-02"], home)
    assert "--end-day 2026-11-02 has no split_traces" in one_error_line(proc, "snapshot")
    assert not (lake / "train_corpus").exists() and not (lake / "heldout_eval_set").exists()


def test_policy_add_refuses_a_missing_checkpoint_and_an_overwrite_without_replace(tmp_path):
    home = tmp_path / "home"
    proc = run_cli(["policy", "add", "mine", "--checkpoint", "/no/such/path"], home)
    assert "no checkpoint at /no/such/path" in one_error_line(proc, "policy")
    assert not (home / "policies" / "mine.json").exists()
    assert run_cli(["policy", "add", "mine", "--scripted", "random"], home).returncode == 0
    proc = run_cli(["policy", "add", "mine", "--scripted", "oracle"], home)
    assert "policy 'mine' is already registered" in one_error_line(proc, "policy") and "--replace" in proc.stderr
    assert '"scripted": "random"' in (home / "policies" / "mine.json").read_text()
    assert run_cli(["policy", "add", "mine", "--scripted", "oracle", "--replace"], home).returncode == 0
    assert '"scripted": "oracle"' in (home / "policies" / "mine.json").read_text()


def test_a_bad_start_date_is_named_as_the_variable(tmp_path):
    proc = run_cli(["corpus", "--day", "2026-11-02"], tmp_path / "home", {"SHOPDISTILL_START_DATE": "2026-13-01"})
    line = one_error_line(proc, "corpus")
    assert "SHOPDISTILL_START_DATE='2026-13-01' is not a valid first day" in line and "--day" not in line


@pytest.mark.parametrize("args, words", [
    (["simulate", "--out", "{tmp}/x", "--days", "0"], "argument --days: 0 is not at least 1"),
    (["train", "--stage", "sft", "--trainer-json", '{"report_to": ['], "argument --trainer-json: not valid JSON"),
    (["train", "--stage", "sft", "--trainer-json", "[1]"], "argument --trainer-json: must be a JSON object"),
], ids=["days-0", "trainer-json-broken", "trainer-json-list"])
def test_option_mistakes_are_refused_by_the_parser_before_any_work(tmp_path, args, words):
    proc = run_cli([a.replace("{tmp}", str(tmp_path)) for a in args], tmp_path / "home", timeout=60)
    assert proc.returncode == 2 and words in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert not (tmp_path / "home" / "dagster").exists() and not (tmp_path / "x").exists()


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
    from shopdistill_assets.sandbox import write_catalog, write_suite
    from shopdistill_assets.sim.toy_world import toy_world

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
    assert f"no server answers at http://127.0.0.1:{port}/v1" in line  # before any episode


def test_eval_without_a_heldout_snapshot_points_to_snapshot(toy, tmp_path):
    proc = run_cli(["eval", "--endpoint", "http://127.0.0.1:9/v1", "--model", "m", "--catalog", str(toy / "catalog")],
                   tmp_path / "home", timeout=60)
    assert "run `shopdistill snapshot`" in one_error_line(proc, "eval")


def test_verbose_shows_the_traceback(tmp_path):
    proc = run_cli(["--verbose", "serve", str(tmp_path / "nothing")], tmp_path / "home", timeout=60)
    assert proc.returncode == 1 and "Traceback" in proc.stderr
