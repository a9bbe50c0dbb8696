"""The reasoning judge as ORO runs it: what it reads, how its answer is read, how it retries.

The endpoint is real HTTP on loopback: a small stdlib server answers scripted replies (JSON
bodies, 429/5xx/401 statuses, a hang) and records every request the judge makes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import openai
import pytest

from shopdistill_assets.agent import OraclePolicy, RolloutConfig, evaluate, serve
from shopdistill_assets.agent.judge import (
    MAX_TOKENS,
    RUBRIC,
    ReasoningJudge,
    build_judge,
    dialogue_transcript,
    episode_transcript,
    final_score,
    parse_judgement,
    reasoning_coefficient,
)
from shopdistill_assets.sim.toy_world import toy_world


def answer(q, why="Gate 4 failed: one pick") -> str:
    return json.dumps({"reasoning_quality": q, "explanation": why})


class ScriptedJudge(ThreadingHTTPServer):
    """Answers POST /v1/chat/completions from `script`: (status, reply text or body, delay_s),
    one per request; the last entry repeats. `requests` keeps every request body."""

    def __init__(self, script):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script, self.requests, self.lock = list(script), [], threading.Lock()

    def next(self, body):
        with self.lock:
            self.requests.append(body)
            return self.script.pop(0) if len(self.script) > 1 else self.script[0]


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        step = self.server.next(body)
        status, reply, delay = step(body) if callable(step) else step
        time.sleep(delay)
        if isinstance(reply, str):
            reply = {"id": "j", "object": "chat.completion", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        data = json.dumps(reply).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the judge gave up waiting: fine
            pass


@contextmanager
def scripted(*script) -> Iterator[ScriptedJudge]:
    server = ScriptedJudge(script)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def judge_for(server, models=("m1",), **kw) -> ReasoningJudge:
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", api_key="k", max_retries=0)
    return ReasoningJudge(client, list(models), backoff_s=kw.pop("backoff_s", 0.01), **kw)


def grade(judge, transcript="QUERY: q\n--- Step 1 ---"):
    import asyncio

    return asyncio.run(judge.grade_transcript(transcript))


# ---- what the judge reads ----------------------------------------------------------------------

def oro_step(think, calls, proxy_calls=(), content="SECRET_CONTENT never shown", query="a kettle"):
    return {"completion": {"reasoning_content": "", "content": content,
                           "message": {"think": think, "tool_call": calls, "response": "shown? no"}},
            "extra_info": {"query": query, "proxy_calls": list(proxy_calls)}}


def inference(tokens, ms=4000.0, model="deepseek-ai/DeepSeek-V3.2-TEE"):
    return {"method": "POST", "path": "/inference/chat/completions", "json_data": {"model": model},
            "response": {"usage": {"completion_tokens": tokens}}, "status_code": 200, "duration_ms": ms}


def search(ids, params=None, status=200):
    return {"method": "GET", "path": "/search/find_product", "params": params or {"q": "kettle", "page": 1},
            "status_code": status, "duration_ms": 300.0, "result_product_ids": ids}


def test_transcript_shows_oro_inputs_and_limits():
    long_think = "I compare 300 at 1099 PHP with 301 at 999 PHP. " * 40  # ~1,900 characters
    big_result = [{"product_id": str(i), "title": "kettle " * 10} for i in range(20)]
    calls = [inference(120), search([str(i) for i in range(25)], {"q": "k" * 300}), *[inference(50)] * 40,
             search([], status=500)]
    dialogue = [oro_step(long_think, [{"name": "find_product", "parameters": {"q": "kettle"}, "result": big_result}],
                         calls[:2]),
                oro_step("  ", [{"name": "recommend_product", "parameters": {"product_ids": "301"},
                                 "result": "Having recommended the products to the user: 301."}], calls[2:])]
    text = dialogue_transcript(dialogue)
    assert text.startswith("QUERY: a kettle\n")
    assert "Summary: 2 search, 0 product views, 41 inference, 2120 completion tokens, 1 failed, 164.6s total" in text
    lines = text.split("\n")
    assert sum(1 for line in lines if line.startswith("  POST ") or line.startswith("  GET ")) == 30
    assert "  ... 13 more calls" in text  # 43 calls, 30 shown
    assert "returned product_ids: " + ",".join(str(i) for i in range(20)) + " (+5 more)" in text
    param_line = next(line for line in lines if line.startswith("  GET /search/find_product"))
    assert '"kkkk' in param_line and param_line.count("k") < 230 and "..." in param_line  # params cut at 200
    thinking = next(line for line in lines if line.startswith("THINKING: "))
    assert len(thinking) == len("THINKING: ") + 1000 + len("...[cut]")
    result = next(line for line in lines if line.startswith("RESULT: ["))
    assert len(result) == len("RESULT: ") + 300 + len("...[cut]")
    assert "RESULT: Having recommended the products to the user: 301." in text  # text results as they are
    assert 'TOOL: recommend_product({"product_ids": "301"})' in text
    assert "SECRET_CONTENT" not in text and "shown? no" not in text  # content and response never shown
    assert text.count("THINKING:") == 1  # a blank think is left out
    assert "no inference call" not in text


def test_transcript_warns_when_no_inference_and_handles_junk():
    text = dialogue_transcript([oro_step("Processing.", [], [search(["1"])])])
    assert "0 inference" in text and "NOTE: no inference call at all" in text
    assert "PROXY LOG: none recorded." in dialogue_transcript([oro_step("x", [])])
    assert dialogue_transcript([]) == dialogue_transcript(None) == dialogue_transcript("junk") == ""
    junk = [{"completion": "x", "extra_info": {"proxy_calls": ["bad", {"path": 7, "duration_ms": "slow"}]}}, 5]
    assert dialogue_transcript(junk).startswith("QUERY: ")


def test_transcript_of_real_oro_records(shared_dir: Path):
    """Conformance records built by ORO's reference agent (joined runs and bare upload arrays):
    the proxy log is gathered from every step, and no content is shown."""
    folder = shared_dir / "conformance/records"
    runs = [json.loads(line) for line in (folder / "oro_problem_run.jsonl").read_text().split("\n") if line.strip()]
    uploads = [json.loads(line) for line in (folder / "oro_upload.jsonl").read_text().split("\n") if line.strip()]
    dialogues = [r["dialogue"] for r in runs if r["dialogue"]] + [u for u in uploads if u]
    assert len(dialogues) >= 30
    for dialogue in dialogues:
        text = dialogue_transcript(dialogue)
        n_calls = sum(len((step.get("extra_info") or {}).get("proxy_calls") or []) for step in dialogue)
        assert text.startswith(f"QUERY: {dialogue[0]['extra_info']['query']}")
        assert sum(line.startswith("  ") and " -> " in line for line in text.split("\n")) == min(n_calls, 30)
        assert text.count("--- Step ") == len(dialogue)
        assert not any(step["completion"]["content"][:60] in text for step in dialogue if step["completion"]["content"])
    assert dialogue_transcript([]) == ""  # a FAILED run uploads []


# ---- reading the answer; the coefficient -------------------------------------------------------

@pytest.mark.parametrize("reply,expected", [
    (answer(0.7), 0.7),
    ("<think>gate 1 passes, gate 4 fails</think>\n" + answer(0.7), 0.7),
    ('Sure. {"reasoning_quality": 0.3, "explanation": "no"} and later {"reasoning_quality": 0.9, "explanation": "x"}', 0.9),
    ('{"reasoning_quality": 0.5, "explanation": "Gate 3 failed: no datum cited, the reply was cut', 0.5),  # max_tokens cut
    ('{"reasoning_quality": 1.7}', 1.0), ('{"reasoning_quality": -0.2}', 0.0), ('{"reasoning_quality": "0.9"}', 0.9),
    ('{"reasoning_quality": null}', None), ('{"reasoning_quality": NaN}', None), ("SCORE: 0.7", None),
    ("0.5", None), ("", None), (None, None), ('{"quality": 0.9}', None), ("[" * 10_000, None),
])
def test_parse_judgement(reply, expected):
    assert parse_judgement(reply) == expected


def test_coefficient_clamped_and_rounded_as_oro():
    assert reasoning_coefficient(0.8) == reasoning_coefficient(0.9) == reasoning_coefficient(7.0) == 1.0
    assert reasoning_coefficient(0.7) == 0.9125 and reasoning_coefficient(0.1) == 0.3875
    assert reasoning_coefficient(-1.0) == 0.3 and reasoning_coefficient(1 / 3) == 0.5917  # 0.591666… rounded
    assert final_score(1.0, 0.7) == 0.9125 and final_score(2 / 3, 0.5) == 0.4917  # 2/3 x 0.7375 rounded


# ---- asking, over real HTTP --------------------------------------------------------------------

def test_request_is_oros_and_answer_is_read():
    with scripted((200, answer(0.7), 0)) as server:
        assert grade(judge_for(server)) == 0.7
    body = server.requests[0]
    assert body["max_tokens"] == MAX_TOKENS == 3072 and body["temperature"] == 0 and body["model"] == "m1"
    assert body["messages"] == [{"role": "system", "content": RUBRIC}, {"role": "user", "content": "QUERY: q\n--- Step 1 ---"}]
    assert all(f"{v}" in RUBRIC for v in (0.1, 0.3, 0.5, 0.7, 0.9)) and '"reasoning_quality"' in RUBRIC


def test_rate_limits_and_server_errors_rotate_models_then_succeed():
    with scripted((429, {"error": "slow down"}, 0), (503, {"error": "busy"}, 0), (200, answer(0.9), 0)) as server:
        started = time.monotonic()
        assert grade(judge_for(server, ("m1", "m2"), backoff_s=0.05)) == 0.9
    assert [r["model"] for r in server.requests] == ["m1", "m2", "m1"]
    assert time.monotonic() - started >= 0.05 + 0.1  # backed off 0.05 s, then 0.1 s


def test_auth_failure_stops_at_once():
    with scripted((401, {"error": "bad key"}, 0), (200, answer(0.9), 0)) as server:
        assert grade(judge_for(server, ("m1", "m2"))) is None
    assert len(server.requests) == 1


def test_a_model_that_answers_garbage_is_not_asked_again():
    with scripted((200, "I think it is great!", 0), (503, {}, 0), (200, answer(0.5), 0)) as server:
        assert grade(judge_for(server, ("m1", "m2"))) == 0.5
    assert [r["model"] for r in server.requests] == ["m1", "m2", "m2"]
    with scripted((200, "no json here", 0)) as server:  # every model answers garbage: unjudged
        assert grade(judge_for(server, ("m1", "m2"))) is None
    assert [r["model"] for r in server.requests] == ["m1", "m2"]


def test_exhausted_attempts_leave_the_episode_unjudged():
    with scripted((500, {"error": "down"}, 0)) as server:
        assert grade(judge_for(server, ("m1", "m2", "m3"), backoff_s=0.001)) is None
    assert len(server.requests) == 8


def test_a_hung_judge_times_out_and_the_next_model_answers():
    with scripted((200, answer(0.9), 2.0), (200, answer(0.7), 0)) as server:
        started = time.monotonic()
        assert grade(judge_for(server, ("slow", "fast"), timeout_s=0.3)) == 0.7
    assert time.monotonic() - started < 1.5 and [r["model"] for r in server.requests] == ["slow", "fast"]


def test_an_empty_trajectory_scores_zero_without_asking():
    with scripted((200, answer(0.9), 0)) as server:
        assert grade(judge_for(server), transcript="") == 0.0
    assert server.requests == []


# ---- wired into the evaluation ----------------------------------------------------------------

def test_evaluation_judges_each_rollout_through_the_endpoint():
    catalog, problems = toy_world(seed=1, n_problems=4)

    def by_gates(body):
        transcript = body["messages"][1]["content"]
        passed = "tokens=" in transcript and "RESULT: [" in transcript and "THINKING:" in transcript
        return 200, answer(0.9 if passed else 0.1), 0

    with serve(OraclePolicy(problems, catalog)) as agent, scripted(by_gates) as judge_server:
        judge = build_judge(f"http://127.0.0.1:{judge_server.server_address[1]}", "m1, m2")
        assert judge is not None and judge.models == ["m1", "m2"] and build_judge(None) is None
        cfg = RolloutConfig(samples=1, request_timeout_s=2.0, episode_time_limit_s=10.0)
        result = evaluate(agent.url, "oracle", problems, catalog, cfg, judge=judge)
    assert [ep.reasoning_score for ep in result.episodes] == [0.9] * len(problems)
    assert len(judge_server.requests) == len(problems)
    transcript = judge_server.requests[0]["messages"][1]["content"]
    episode = next(ep for ep in result.episodes if ep.query in transcript)
    assert transcript == episode_transcript(episode)
    assert f"{sum(1 for m in episode.messages if m['role'] == 'assistant')} inference" in transcript
    assert "GET /search/find_product" in transcript and "returned product_ids: " in transcript
    assert result.metrics["reasoning_coef"] == 1.0 and result.metrics["final_score"] == result.metrics["asr"]
