"""`shopdistill serve` and `shopdistill eval` as a user runs them: separate processes over HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from shopdistill_assets.agent.server import wait_ready
from shopdistill_assets.sandbox import write_catalog, write_suite
from shopdistill_assets.sim.toy_world import toy_world

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


def test_tiny_checkpoint_served_and_evaluated_end_to_end(world, tmp_path):
    from shopdistill_assets.training.tiny_model import build_tiny_model

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


# ---- hostile clients (issue 21 item 10) and a model the server does not serve (item 6) ------------


def _post(url: str, body: bytes) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url + "/chat/completions", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_header_slowloris_is_cut_at_the_request_deadline_and_threads_are_bounded():
    import threading
    import time

    from shopdistill_assets.agent.policies import RandomPolicy
    from shopdistill_assets.agent.server import serve

    with serve(RandomPolicy(seed=0), client_timeout_s=1.0, request_timeout_s=2.0, max_connections=8) as server:
        base_threads = threading.active_count()
        clients = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(20)]
        request = b"POST /v1/chat/completions HTTP/1.1\r\nX-Slow: " + b"a" * 64
        start, closed_at, peak = time.monotonic(), {}, 0
        for i in range(len(request)):  # one header byte per client every 0.4 s: under the socket timeout
            for n, client in enumerate(clients):
                if n in closed_at:
                    continue
                try:
                    client.sendall(request[i:i + 1])
                    client.settimeout(0.01)
                    if client.recv(4096) == b"":
                        closed_at[n] = time.monotonic() - start
                except (TimeoutError, BlockingIOError):
                    pass
                except OSError:
                    closed_at[n] = time.monotonic() - start
            peak = max(peak, threading.active_count() - base_threads)
            if len(closed_at) == len(clients) or time.monotonic() - start > 8:
                break
            time.sleep(0.4)
        for client in clients:
            client.close()
        assert peak <= 8  # 12 of 20 were answered 503 at once, no thread each
        assert len(closed_at) == 20 and max(closed_at.values()) < 4.0, closed_at  # the deadline is 2 s
        status, reply = _post(server.url, json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode())
        assert status == 200 and reply["choices"], reply  # still serving


def test_a_lone_surrogate_escape_in_a_request_is_a_400_not_a_500():
    from shopdistill_assets.agent.policies import RandomPolicy
    from shopdistill_assets.agent.server import serve

    with serve(RandomPolicy(seed=0)) as server:
        body = b'{"model": "m", "messages": [{"role": "user", "content": "price \\ud800 under 500"}]}'
        status, reply = _post(server.url, body)
        assert status == 400 and "surrogate" in reply["error"]["message"], reply
        paired = b'{"model": "m", "messages": [{"role": "user", "content": "\\ud83d\\ude00 under 500"}]}'
        assert _post(server.url, paired)[0] == 200


def test_eval_of_a_model_the_server_does_not_serve_fails_before_any_episode(world, tmp_path):
    env = {**os.environ, "SHOPDISTILL_HOME": str(tmp_path / "home")}
    proc, url = _serve(["--policy", "oracle", "--suites", str(world / "suites"), "--catalog", str(world / "catalog")], env)
    try:
        status, reply = _post(url, json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}).encode())
        assert status == 404 and reply["error"]["code"] == "model_not_found"
        out = subprocess.run([*CLI, "eval", "--endpoint", url, "--model", "gpt-4o", "--samples", "1",
                              "--heldout", str(world / "suites"), "--catalog", str(world / "catalog")],
                             env=env, capture_output=True, text=True, timeout=120)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert out.returncode == 1 and out.stdout == ""  # no scores at all, not the oracle's
    assert out.stderr.strip() == (f"shopdistill eval: error: the endpoint {url} does not serve model 'gpt-4o' "
                                  f"(it serves: oracle); pass --model with one of those")
