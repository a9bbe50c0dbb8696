"""`shopdistill serve` and `shopdistill eval` as a user runs them: separate processes over HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from shopdistill_assets.eval.server import wait_ready
from shopdistill_assets.sandbox import write_catalog, write_suite
from shopdistill_assets.eval.toy_world import toy_world

CLI = [sys.executable, "-m", "shopdistill_assets.cli"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("world")
    catalog, problems = toy_world(seed=3, n_problems=9)
    write_catalog(catalog, root / "catalog" / "documents.jsonl.gz")
    write_suite(problems, root / "suites" / "toy.json")
    return root


def _serve(args: list[str], env: dict) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen([*CLI, "serve", *args, "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/v1"
    if not wait_ready(url, timeout_s=120):
        proc.kill()
        raise AssertionError(f"server did not come up: {proc.stderr.read().decode()[-2000:]}")
    return proc, url


def _eval(url: str, model: str, world: Path, env: dict, samples: int, extra: list[str] = ()) -> dict:
    out = subprocess.run([*CLI, "eval", "--endpoint", url, "--model", model, "--samples", str(samples),
                          "--heldout", str(world / "suites"), "--catalog", str(world / "catalog"), *extra],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


@pytest.mark.slow
def test_oracle_and_random_through_the_cli(world, tmp_path):
    env = {**os.environ, "SHOPDISTILL_HOME": str(tmp_path / "home")}
    for policy, lo, hi in (("oracle", 0.95, 1.0), ("random", 0.0, 0.1)):
        proc, url = _serve(["--policy", policy, "--suites", str(world / "suites"), "--catalog", str(world / "catalog")], env)
        try:
            result = _eval(url, policy, world, env, samples=2)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        assert lo <= result["asr"] <= hi, (policy, result["asr"])
        assert set(result["pass_at_k"]) == {"1", "2"} and result["pass_at_1"] == result["asr"]
        assert {"Product", "Shop", "Voucher"} <= set(result["by_category"])


@pytest.mark.slow
def test_tiny_checkpoint_served_and_evaluated_end_to_end(world, tmp_path):
    from shopdistill_assets.eval.tiny_model import build_tiny_model

    checkpoint = build_tiny_model(tmp_path / "tiny")
    env = {**os.environ, "SHOPDISTILL_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1"}
    proc, url = _serve([str(checkpoint), "--max-new-tokens", "24"], env)
    try:
        result = _eval(url, "tiny", world, env, samples=1, extra=["--limit", "3", "--max-steps", "2"])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert result["asr"] == 0.0  # untrained: every episode is a scored failure with a reason
    reasons = result["errors"]["failure_reasons"]
    assert sum(reasons.values()) == 3 and "endpoint_error" not in reasons


def test_serve_stops_on_sigterm_even_when_its_parent_ignored_it(tmp_path):
    """A server started by a process that ignores SIGTERM (Dagster maps SIGTERM to SIGINT's
    handler, "ignore" under a background shell) inherits the ignore; `docker stop` and a pod's
    shutdown send SIGTERM, so the server must install its own handler."""
    env = {**os.environ, "SHOPDISTILL_HOME": str(tmp_path / "home")}
    port = _free_port()
    # A parent that ignores SIGTERM, then execs the server in place: exec keeps "ignore".
    parent = ("import os, signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")
    proc = subprocess.Popen([sys.executable, "-c", parent, *CLI[1:], "serve", "--policy", "random",
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert wait_ready(f"http://127.0.0.1:{port}/v1", timeout_s=120), proc.stderr.read().decode()[-2000:]
        proc.terminate()
        assert proc.wait(timeout=30) == 0  # a clean shutdown, not a kill
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
