"""The evaluation under hostile input: the evaluated model's tool calls, the sandbox's arithmetic,
a dripping endpoint, and raw-socket clients of the serving endpoint.

Every hostile tool call must become a tool error message or a scored episode failure with a
reason; the evaluation always ends with its summary; nothing waits past its deadline.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import socketserver
import threading
import time

import pytest

from shopdistill_assets.agent import OraclePolicy, RolloutConfig, evaluate, serve
from shopdistill_assets.agent.policies import tool_history
from shopdistill_assets.sandbox import Problem, Sandbox
from shopdistill_assets.sandbox.safe_math import UnsafeExpression
from shopdistill_assets.sandbox.safe_math import evaluate as safe_eval
from shopdistill_assets.sim.toy_world import toy_world

FAST = {"request_timeout_s": 2.0, "retries": 1, "backoff_s": 0.05, "episode_time_limit_s": 20.0}


@pytest.fixture(scope="module")
def world():
    return toy_world(seed=0, n_problems=6)


# ---------------------------------------------------------------- python_execute: bounded before computing

@pytest.mark.parametrize("code", [
    "round(1, -10**8)", "round(7, -10**6)", "round(1.5, 10**9)", "[0]*10**8", "(0,)*10**8", "[1]*3",
    "[1]+2", "-[1]", "[1,2]*[3]", "max([])", "min()", "round(1, 2.5)", "sum([[1]])", "abs([1])",
    "sum(1, 2)", "[1, 2]", "(1+2j)", "True + 1", "9**9**9", "10**15*10**15", "(-8)**0.5", "1/0",
    "1" + "+1" * 999, "(" * 90 + "1" + ")" * 90, "-" * 1500 + "1", "max(" * 60 + "1" + ")" * 60,
])
def test_python_execute_rejects_or_answers_fast(code):
    started = time.monotonic()
    try:
        value = safe_eval(code)
    except UnsafeExpression as exc:
        assert str(exc)
    else:
        assert isinstance(value, (int, float)) and not isinstance(value, bool)
    assert time.monotonic() - started < 5.0, code  # microseconds alone; round(1, -10**8) ran for minutes


@pytest.mark.parametrize("code,expected", [
    ("round(1234.567, -2)", 1200), ("round(2.675, 2)", 2.67), ("max([3, 9, 4])", 9), ("min(3, 9)", 3),
    ("sum([1, 2.5])", 3.5), ("abs(-4)", 4), ("2**10", 1024), ("1 - 2 * 3 % 4 // 1", -1), ("round(0.1 * 3, 15)", 0.3),
])
def test_python_execute_still_does_arithmetic(code, expected):
    assert safe_eval(code) == pytest.approx(expected)


def test_python_execute_memory_stays_flat():
    """Refused before anything is allocated (today's code built the 800 MB list, then refused it)."""
    import tracemalloc

    tracemalloc.start()
    try:
        for code in ("[0]*10**8", "[0]*99999999", "(1,)*10**8", "[[0]*1000]*1000", "max([0]*10**8)"):
            with pytest.raises(UnsafeExpression):
                safe_eval(code)
        peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert peak_mb < 5, f"peak allocation {peak_mb:.0f} MB"


def test_sandbox_math_workers_have_a_hard_deadline(world):
    """A worker that does not answer in time is killed with its process; the next call gets a new one."""
    from shopdistill_assets.sandbox.math_worker import MathWorkers

    catalog, _ = world
    with MathWorkers(size=1, timeout_s=0.5) as workers:
        box = Sandbox(catalog, math=workers.evaluate)
        assert box.call("python_execute", {"code": "12 * 3"}).content() == "36"
        [pid] = workers.pids()
        os.kill(pid, signal.SIGSTOP)  # stands in for a computation that never ends
        started = time.monotonic()
        stuck = box.call("python_execute", {"code": "2 + 2"})
        assert time.monotonic() - started < 4.0  # stopped, it would never answer
        assert not stuck.ok and "timed out" in stuck.error
        assert workers.pids() == [] and workers.killed == 1
        assert box.call("python_execute", {"code": "round(2.5) + 2"}).content() == "4"
        failed = box.call("python_execute", {"code": "[1]+2"})
        assert not failed.ok and "arithmetic" in failed.error
        assert len(workers.pids()) == 1
    assert workers.pids() == []


# ---------------------------------------------------------------- hostile tool calls from the evaluated model

HOSTILE_CALLS = {
    "dict-name": [{"id": "c1", "type": "function", "function": {"name": {"a": 1}, "arguments": "{}"}}],
    "list-name": [{"id": "c1", "type": "function", "function": {"name": ["find_product"], "arguments": "{}"}}],
    "null-name": [{"id": "c1", "type": "function", "function": {"name": None, "arguments": "{}"}}],
    "number-name": [{"id": "c1", "type": "function", "function": {"name": 10 ** 30, "arguments": "{}"}}],
    "deep-args": [{"id": "c1", "type": "function",
                   "function": {"name": "find_product", "arguments": "[" * 100_000 + "]" * 100_000}}],
    "deep-dict-args": [{"id": "c1", "type": "function",
                        "function": {"name": "find_product", "arguments": '{"q":' + '{"a":' * 50_000 + "1" + "}" * 50_001}}],
    "object-args": [{"id": "c1", "type": "function",
                     "function": {"name": "find_product", "arguments": {"q": [[[["x"]]]], "page": {"n": 1}}}}],
    "huge-int": [{"id": "c1", "type": "function",
                  "function": {"name": "find_product", "arguments": '{"q": "bag", "page": ' + "9" * 4000 + "}"}}],
    "too-huge-int": [{"id": "c1", "type": "function",
                      "function": {"name": "find_product", "arguments": '{"q": "bag", "page": ' + "9" * 5000 + "}"}}],
    "inf-page": [{"id": "c1", "type": "function",
                  "function": {"name": "find_product", "arguments": '{"q": "bag", "page": 1e999}'}}],
    "voucher-nan": [{"id": "c1", "type": "function",
                     "function": {"name": "calculate_voucher",
                                  "arguments": '{"product_ids": "PRODUCT", "threshold": NaN, "discount_type": "percentage",'
                                               ' "discount": Infinity, "cap": -Infinity}'}}],
    "py-type-error": [{"id": "c1", "type": "function",
                       "function": {"name": "python_execute", "arguments": '{"code": "[1]+2"}'}}],
    "py-round": [{"id": "c1", "type": "function",
                  "function": {"name": "python_execute", "arguments": '{"code": "round(1, -10**8)"}'}}],
    "py-repeat": [{"id": "c1", "type": "function",
                   "function": {"name": "python_execute", "arguments": '{"code": "[0]*10**8"}'}}],
    "py-not-code": [{"id": "c1", "type": "function",
                     "function": {"name": "python_execute", "arguments": '{"code": {"x": [1, 2]}}'}}],
    "ids-nested": [{"id": "c1", "type": "function",
                    "function": {"name": "view_product_information", "arguments": {"product_ids": [[1, [2]], {"a": 3}]}}}],
    "not-a-list": {"oops": True},
    "call-not-dict": ["find_product", 7, None],
}

# ORO's search server reads these as query text and answers no products, not an error: a page
# that is not 1-5 ("999…", "inf"), ids that name no product ("[1, [2]]").
SERVER_ANSWERS_NO_PRODUCTS = ("huge-int", "inf-page", "ids-nested")


class HostilePolicy:
    """First turn: the hostile tool calls named by the query; later turns: the oracle's answer."""

    name = "hostile"

    def __init__(self, oracle: OraclePolicy, product_id: str) -> None:
        self.oracle, self.product_id = oracle, product_id

    def __call__(self, messages, tools=None, **params):
        history = tool_history(messages)
        mode = messages[1]["content"].split(" :: ")[0]
        if not history and not any(m["role"] == "tool" for m in messages):
            calls = json.loads(json.dumps(HOSTILE_CALLS[mode]).replace("PRODUCT", self.product_id))
            return {"role": "assistant", "content": "", "tool_calls": calls}
        return self.oracle([messages[0], {"role": "user", "content": messages[1]["content"].split(" :: ")[1]},
                            *messages[2:]], tools)


def _hostile_problems(problems: list[Problem]) -> list[Problem]:
    base = problems[0]
    return [Problem(f"{mode} :: {base.query}", base.category, base.reward, base.voucher, problem_id=f"hostile-{mode}")
            for mode in HOSTILE_CALLS]


def test_hostile_tool_calls_end_as_tool_errors_or_scored_failures(world):
    catalog, problems = world
    hostile = _hostile_problems(problems)
    oracle = OraclePolicy([Problem(p.query.split(" :: ")[1], p.category, p.reward, p.voucher,
                                   problem_id=p.problem_id) for p in hostile], catalog)
    with serve(HostilePolicy(oracle, next(iter(catalog.products)))) as server:
        started = time.monotonic()
        result = evaluate(server.url, "hostile", hostile, catalog, RolloutConfig(samples=1, max_steps=6, **FAST))
    assert time.monotonic() - started < 30
    assert len(result.episodes) == len(HOSTILE_CALLS)
    by_mode = {ep.query.split(" :: ")[0]: ep for ep in result.episodes}
    for mode, ep in by_mode.items():
        tool_errors = [m["content"] for m in ep.messages if m["role"] == "tool" and "Error" in m["content"]]
        assert ep.failure_reason in (None, "unknown_tool", "bad_tool_json", "no_tool_call"), (mode, ep.failure_reason)
        assert ep.failure_reason or tool_errors or mode in SERVER_ANSWERS_NO_PRODUCTS, mode
        assert ep.error is None or "internal" not in ep.error, (mode, ep.error)
    assert {m: by_mode[m].failure_reason for m in ("dict-name", "list-name", "null-name", "number-name")} == dict.fromkeys(
        ("dict-name", "list-name", "null-name", "number-name"), "unknown_tool")
    assert by_mode["deep-args"].failure_reason == by_mode["too-huge-int"].failure_reason == "bad_tool_json"
    for mode in ("py-type-error", "py-round", "py-repeat", "py-not-code", "voucher-nan", "object-args",
                 *SERVER_ANSWERS_NO_PRODUCTS):
        ep = by_mode[mode]
        first_result = next(m["content"] for m in ep.messages if m["role"] == "tool")
        expected = "[]" if mode in SERVER_ANSWERS_NO_PRODUCTS else '"Error: '
        assert first_result.startswith(expected), (mode, first_result)
        assert ep.success, (mode, ep.failure_reason)  # the episode went on and the oracle answered
    summary = json.loads(json.dumps(result.summary()))
    assert summary["errors"]["episodes"] == len(HOSTILE_CALLS)
    assert summary["errors"]["endpoint_error_episodes"] == 0 and not summary["errors"]["all_endpoint_errors"]


def test_the_cli_prints_its_json_on_hostile_tool_calls(world, tmp_path, capsys):
    from shopdistill_assets.cli.commands import main
    from shopdistill_assets.sandbox import write_catalog, write_suite

    catalog, problems = world
    hostile = _hostile_problems(problems)
    write_catalog(catalog, tmp_path / "catalog" / "documents.jsonl.gz")
    write_suite(hostile, tmp_path / "suites" / "hostile.json")
    oracle = OraclePolicy([Problem(p.query.split(" :: ")[1], p.category, p.reward, p.voucher,
                                   problem_id=p.problem_id) for p in hostile], catalog)
    with serve(HostilePolicy(oracle, next(iter(catalog.products)))) as server:
        code = main(["eval", "--endpoint", server.url, "--model", "hostile", "--samples", "1", "--max-steps", "6",
                     "--heldout", str(tmp_path / "suites"), "--catalog", str(tmp_path / "catalog"),
                     "--timeout", "2", "--episode-timeout", "20"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0
    assert summary["counts"]["samples"] == len(HOSTILE_CALLS)
    assert summary["deadlines"]["episode_time_limit_s"] == 20.0 and summary["deadlines"]["request_timeout_s"] == 2.0


def test_an_internal_failure_is_one_failed_episode_not_a_lost_evaluation(world):
    """Defence in depth: whatever raises inside one episode ends that episode, not the evaluation."""
    catalog, problems = world

    class BrokenSandbox(Sandbox):
        def call(self, name, arguments):
            if name == "recommend_product":
                raise RuntimeError("sandbox bug")
            return super().call(name, arguments)

    with serve(OraclePolicy(problems, catalog)) as server:
        result = evaluate(server.url, "oracle", problems, catalog, RolloutConfig(samples=1, **FAST),
                          sandbox=BrokenSandbox(catalog))
    assert len(result.episodes) == len(problems)
    assert {ep.failure_reason for ep in result.episodes} == {"internal_error"}
    assert all("RuntimeError: sandbox bug" in ep.error for ep in result.episodes)
    assert result.errors["failure_reasons"] == {"internal_error": len(problems)}


# ---------------------------------------------------------------- deadlines against a dripping endpoint

class _Drip(socketserver.BaseRequestHandler):
    """Answers 200 with a long Content-Length, then one byte every `gap` seconds."""

    gap = 0.2

    def handle(self):
        self.request.settimeout(5)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = self.request.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
            while len(body) < length:
                body += self.request.recv(65536)
            self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
            while not self.server.stopping.is_set():
                time.sleep(self.gap)
                self.request.sendall(b" ")
        except OSError:
            return


@pytest.fixture
def dripping():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Drip)
    server.daemon_threads = True
    server.stopping = threading.Event()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()


def test_request_deadline_is_total_not_per_read(world, dripping):
    catalog, problems = world
    cfg = RolloutConfig(samples=2, concurrency=4, request_timeout_s=0.6, retries=1, backoff_s=0.05,
                        episode_time_limit_s=60.0)
    started = time.monotonic()
    result = evaluate(dripping, "drip", problems[:2], catalog, cfg)
    elapsed = time.monotonic() - started
    assert elapsed < 8.0, elapsed  # 2 attempts x 0.6 s, not minutes of drip
    assert [ep.failure_reason for ep in result.episodes] == ["endpoint_error"] * 4
    assert all(ep.request_failures == 2 and "deadline" in ep.error for ep in result.episodes)
    assert result.errors["all_endpoint_errors"] and result.errors["endpoint_error_episodes"] == 4


def test_episode_deadline_cuts_a_dripping_request(world, dripping):
    catalog, problems = world
    cfg = RolloutConfig(samples=1, request_timeout_s=30.0, retries=2, backoff_s=0.05, episode_time_limit_s=1.0)
    started = time.monotonic()
    result = evaluate(dripping, "drip", problems[:3], catalog, cfg)
    assert time.monotonic() - started < 6.0
    assert [ep.failure_reason for ep in result.episodes] == ["episode_timeout"] * 3
    assert all(ep.latency_s < 4.0 for ep in result.episodes)


def test_the_cli_deadline_flags_bound_a_dripping_endpoint(world, dripping, tmp_path, capsys):
    from shopdistill_assets.cli.commands import main
    from shopdistill_assets.sandbox import write_catalog, write_suite

    catalog, problems = world
    write_catalog(catalog, tmp_path / "catalog" / "documents.jsonl.gz")
    write_suite(problems[:2], tmp_path / "suites" / "toy.json")
    started = time.monotonic()
    main(["eval", "--endpoint", dripping, "--model", "drip", "--samples", "1", "--heldout", str(tmp_path / "suites"),
          "--catalog", str(tmp_path / "catalog"), "--timeout", "30", "--episode-timeout", "1"])
    assert time.monotonic() - started < 8.0
    summary = json.loads(capsys.readouterr().out)
    assert summary["failure_reasons"] == {"episode_timeout": 2}


def test_a_slow_tool_call_is_cut_by_the_episode_deadline(world):
    catalog, problems = world

    class SlowSandbox(Sandbox):
        def call(self, name, arguments):
            time.sleep(3)  # a tool stuck off the event loop
            return super().call(name, arguments)

    with serve(OraclePolicy(problems, catalog)) as server:
        cfg = RolloutConfig(samples=1, **{**FAST, "episode_time_limit_s": 1.0})
        started = time.monotonic()
        result = evaluate(server.url, "oracle", problems[:2], catalog, cfg, sandbox=SlowSandbox(catalog))
    assert time.monotonic() - started < 4.5  # a tool blocking the event loop took 3 s per episode, one after the other
    assert [ep.failure_reason for ep in result.episodes] == ["episode_timeout"] * 2


# ---------------------------------------------------------------- the serving endpoint over raw sockets

def _exchange(port: int, raw: bytes, wait_s: float = 3.0, close_write: bool = False) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as sock:
        sock.sendall(raw)
        if close_write:
            sock.shutdown(socket.SHUT_WR)
        data = b""
        try:
            while b"\r\n\r\n" not in data or len(data) < _expected_length(data):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except TimeoutError:
            pass
        return data


def _expected_length(data: bytes) -> int:
    head, _, _ = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(head) + 4 + int(line.split(b":")[1])
    return len(data)


def _status(reply: bytes) -> int | None:
    return int(reply.split(b" ")[1]) if reply.startswith(b"HTTP/1.") else None


def _post(body: bytes, length: str | None = None) -> bytes:
    length = str(len(body)) if length is None else length
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    if length != "":
        head += f"Content-Length: {length}\r\n".encode()
    return head + b"\r\n" + body


GOOD = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.mark.parametrize("name,raw,status", [
    ("negative length", _post(GOOD, "-1"), 400),
    ("negative huge length", _post(GOOD, "-99999999999999999999"), 400),
    ("non-numeric length", _post(GOOD, "12abc"), 400),
    ("two lengths", _post(GOOD, f"{len(GOOD)}, {len(GOOD)}"), 400),
    ("no length", _post(GOOD, ""), 411),
    ("over the cap", _post(b"", str(1 << 40)), 413),
    ("deep JSON", _post(b"[" * 200_000 + b"]" * 200_000), 400),
    ("deep messages", _post(b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"), 400),
    ("huge max_tokens", _post(b'{"messages": [{"role": "user"}], "max_tokens": ' + b"9" * 400 + b"}"), 400),
    ("huge float temperature", _post(b'{"messages": [{"role": "user"}], "temperature": 1e999}'), 400),
    ("bad utf-8", _post(b'{"messages": [{"role": "\xff"}]}'), 400),
    ("roles not strings", _post(b'{"messages": [{"role": 7}]}'), 400),
])
def test_server_answers_bad_requests_with_400s(world, name, raw, status):
    catalog, problems = world
    with serve(OraclePolicy(problems, catalog), client_timeout_s=2.0) as server:
        reply = _exchange(server.port, raw)
        assert _status(reply) == status, (name, reply[:200])
        if status != 411:
            assert b'"error"' in reply
        ok = _exchange(server.port, _post(GOOD))
        assert _status(ok) == 200, name


def test_server_answers_a_truncated_body_and_policy_garbage(world):
    catalog, problems = world

    def garbage(messages, tools=None, **params):
        if messages[-1]["content"] == "list":
            return ["not", "a", "message"]
        return {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": object()}}]}

    with serve(garbage, client_timeout_s=1.0) as server:
        cut = _post(GOOD)[:-10]
        assert _status(_exchange(server.port, cut, close_write=True)) == 400
        for content in ("list", "object"):
            body = json.dumps({"messages": [{"role": "user", "content": content}]}).encode()
            assert _status(_exchange(server.port, _post(body))) == 500


def test_slow_clients_do_not_pin_the_server(world):
    catalog, problems = world
    with serve(OraclePolicy(problems, catalog), client_timeout_s=0.5, body_timeout_s=1.0) as server:
        idle = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        dripper = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        started = time.monotonic()
        dripper.sendall(_post(GOOD)[: -len(GOOD)])
        answer = None
        for byte in GOOD:  # one byte every 0.2 s: each read is in time, the whole body is not
            if select.select([dripper], [], [], 0.2)[0]:
                answer = dripper.recv(65536)
                break
            try:
                dripper.sendall(bytes([byte]))
            except OSError:
                answer = b""
                break
        given_up = time.monotonic() - started
        assert answer is not None and given_up < 5.0, given_up  # the whole body would take ~11 s
        assert answer == b"" or _status(answer) == 408
        assert select.select([idle], [], [], 3.0)[0] and idle.recv(1) == b""  # closed by the socket timeout
        idle.close()
        dripper.close()
        assert _status(_exchange(server.port, _post(GOOD))) == 200
