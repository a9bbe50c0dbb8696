"""The evaluation engine end to end, through the real HTTP server on loopback.

Scripted policies (oracle, random, deliberately malformed), a tiny transformers model built
offline, and misbehaving endpoints (garbage, 500s, hangs) all go through `evaluate`; every
episode must come back scored, with a reason when it fails, in bounded time.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest

from shopdistill_assets.agent import (
    OraclePolicy,
    RandomPolicy,
    RolloutConfig,
    evaluate,
    metrics_table,
    pass_at_k,
    plot_asr,
    reasoning_coefficient,
    serve,
)
from shopdistill_assets.agent.hf_policy import parse_completion
from shopdistill_assets.agent.judge import ReasoningJudge
from shopdistill_assets.agent.policies import assistant_message, tool_history
from shopdistill_assets.sim.toy_world import toy_world

FAST = {"request_timeout_s": 1.0, "retries": 1, "backoff_s": 0.05, "episode_time_limit_s": 10.0}


@pytest.fixture(scope="module")
def world():
    return toy_world(seed=0, n_problems=21)


@pytest.fixture(scope="module")
def baselines(world):
    catalog, problems = world
    results = {}
    for policy in (OraclePolicy(problems, catalog), RandomPolicy(seed=0)):
        with serve(policy) as server:
            results[policy.name] = evaluate(server.url, policy.name, problems, catalog,
                                            RolloutConfig(samples=4, concurrency=8))
    return results


# -- metrics ---------------------------------------------------------------------------------

@pytest.mark.parametrize("n,c,k,expected", [
    (5, 2, 1, 0.4), (5, 2, 2, 0.7), (5, 0, 3, 0.0), (5, 5, 1, 1.0), (5, 5, 5, 1.0),
    (5, 3, 3, 1.0),  # k > n - c: every k-subset holds a success
    (8, 1, 4, 0.5), (10, 3, 2, 1 - 21 / 45),
])
def test_pass_at_k_hand_worked(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_is_stable_for_large_n():
    assert pass_at_k(10_000, 1, 1) == pytest.approx(1e-4)
    assert pass_at_k(10_000, 5_000, 100) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


def test_reasoning_coefficient():
    assert reasoning_coefficient(0.9) == 1.0 and reasoning_coefficient(0.8) == 1.0
    assert reasoning_coefficient(0.7) == pytest.approx(0.9125)
    assert reasoning_coefficient(0.1) == pytest.approx(0.3875)


# -- scripted policies through the server ------------------------------------------------------

def test_oracle_and_random_bracket_the_scale(baselines, world):
    _, problems = world
    oracle, rand = baselines["oracle"].metrics, baselines["random"].metrics
    assert oracle["asr"] >= 0.95 and oracle["pass_at_1"] == oracle["asr"]
    assert set(oracle["pass_at_k"]) == {"1", "2", "4"}
    assert oracle["format_valid_rate"] == 1.0 and oracle["mean_steps"] == 3.0
    assert {c: oracle["by_category"][c]["problems"] for c in ("Product", "Shop", "Voucher")} == {
        "Product": 7, "Shop": 7, "Voucher": 7}
    assert oracle["counts"] == {"problems": 21, "samples": 84, "successes": 84, "judged": 0}
    assert rand["asr"] <= 0.05 and rand["format_valid_rate"] == 1.0
    # random recommends one product: every two-item problem fails on its count
    assert rand["failure_reasons"]["too_few_products"] == 56
    assert rand["pass_at_k"]["4"] >= rand["pass_at_k"]["1"]
    assert baselines["random"].errors["endpoint_errors"] == []


def test_episode_messages_are_canonical_tool_calls(baselines):
    episode = baselines["oracle"].episodes[0]
    roles = [m["role"] for m in episode.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool"]
    calls = [c for m in episode.messages if m["role"] == "assistant" for c in m["tool_calls"]]
    assert [c["function"]["name"] for c in calls] == ["find_product", "recommend_product", "terminate"]
    assert all(isinstance(c["function"]["arguments"], str) and json.loads(c["function"]["arguments"]) for c in calls)
    results = {m["tool_call_id"]: json.loads(m["content"]) for m in episode.messages if m["role"] == "tool"}
    assert set(results) == {c["id"] for c in calls}
    assert isinstance(results[calls[0]["id"]], list) and len(results[calls[0]["id"]]) > 0
    assert episode.messages[2]["reasoning_content"].startswith("The user asks")
    row = baselines["oracle"].canonical_rows()[0]
    assert row["dialect"] == "shopdistill.rollout" and row["trace_id"].startswith("t_") and len(row["trace_id"]) == 18
    assert row["score"] == 1.0 and row["n_tool_calls"] == 3 and row["day"] == row["updated_at"][:10]
    assert json.loads(row["messages"]) == episode.messages and len(json.loads(row["tools"])) == 6
    assert len({r["trace_id"] for r in baselines["oracle"].canonical_rows()}) == 84


def test_metrics_table_and_plot(baselines, tmp_path):
    table = metrics_table(baselines)
    lines = table.strip().splitlines()
    assert lines[0].startswith("| policy | ASR | pass@1 | pass@2 | pass@4 | Product | Shop | Voucher")
    assert lines[2].startswith("| oracle | 100.0 | 100.0 |") and lines[3].startswith("| random |")
    png = plot_asr(baselines, tmp_path / "asr.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_search_grounding_reads_only_well_formed_searches():
    from types import SimpleNamespace

    from shopdistill_assets.agent.metrics import search_grounding

    def call(name, arguments):
        return {"type": "function", "function": {"name": name, "arguments": arguments}}

    def episode(query, *calls):
        return SimpleNamespace(query=query, messages=[
            {"role": "user", "content": query}, {"role": "assistant", "tool_calls": list(calls)},
            {"role": "assistant", "tool_calls": "not a list"}, "not a message"])

    read = episode("Find me a Nike running shoes, size: eu:40.",
                   call("find_product", '{"q": "nike shoe eu:40", "page": 1}'),  # plural folded, as the search does
                   call("view_product_information", '{"product_ids": "1"}'))
    ignored = episode("I need a tefal umbrella.",
                      call("find_product", '{"q": "kaiser guitar strings umbrella"}'),
                      call("find_product", '{"q": '), call("find_product", '{"q": ["tefal"]}'),
                      call("find_product", "[1, 2]"), call("find_product", None),
                      call("find_product", "[" * 200_000), call("find_product", {"q": "tefal"}))
    grounding = search_grounding([read, ignored])
    assert grounding == {"searches": 2, "word_share": (4 + 1) / (4 + 4), "all_words_share": 0.5}
    assert search_grounding([]) == {"searches": 0, "word_share": None, "all_words_share": None}


def test_scripted_policies_read_hostile_arguments_as_text():
    deep = "[" * 200_000  # deeper than the JSON parser goes: RecursionError, not ValueError
    messages = [{"role": "user", "content": "I need a tefal umbrella."},
                {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "find_product", "arguments": deep}}]},
                {"role": "tool", "tool_call_id": "c1", "content": deep}]
    assert tool_history(messages) == [("find_product", {}, deep)]
    reply = RandomPolicy(seed=0)(messages)
    assert reply["tool_calls"][0]["function"]["name"] == "recommend_product"


def test_search_grounding_of_the_baselines(baselines):
    # the random floor searches with words of the request only; the metrics carry it
    assert baselines["random"].metrics["search_grounding"]["word_share"] == 1.0
    assert baselines["random"].metrics["search_grounding"]["searches"] == 84


class MalformedPolicy:
    """One failure mode per problem, chosen by a word of the query."""

    name = "malformed"

    def __call__(self, messages, tools=None, **params):
        history = tool_history(messages)
        step = len(history)
        if not history:
            return assistant_message("search", [("find_product", {"q": "bag", "page": 1})], step)
        mode = messages[1]["content"]
        if "kettle" in mode or "shoes" in mode:
            bad = assistant_message("oops", [("recommend_product", {})], step)
            bad["tool_calls"][0]["function"]["arguments"] = '{"product_ids": "1'  # cut-off JSON
            return bad
        if "earbuds" in mode:
            return assistant_message("x", [("buy_now", {"product_ids": "1"})], step)
        if "lamp" in mode:
            return {"role": "assistant", "content": '<tool_call>{"name": "terminate", "argu'}
        if "bottle" in mode:
            return {"role": "assistant", "content": ""}
        return assistant_message("search again", [("find_product", {"q": "bag", "page": 1})], step)


def test_malformed_output_ends_episodes_as_scored_failures(world):
    catalog, _ = world
    from shopdistill_assets.sandbox import Problem

    def problem(q):
        return Problem.from_dict({"query": q, "category": "Product", "reward": {"product_id": "1", "title": ["x"]}})

    problems = [problem(f"find a {w}") for w in ("kettle", "earbuds", "desk lamp", "water bottle", "yoga mat")]
    with serve(MalformedPolicy()) as server:
        result = evaluate(server.url, "malformed", problems, catalog, RolloutConfig(samples=1, max_steps=3, **FAST))
    reasons = {ep.query.split()[-1]: ep.failure_reason for ep in result.episodes}
    assert reasons == {"kettle": "bad_tool_json", "earbuds": "unknown_tool", "lamp": "bad_tool_json",
                       "bottle": "no_tool_call", "mat": "max_steps"}
    assert [ep.format_valid for ep in result.episodes] == [False, False, False, False, True]
    assert [ep.steps for ep in result.episodes] == [2, 2, 2, 2, 3]
    assert result.metrics["asr"] == 0.0 and result.metrics["format_valid_rate"] == pytest.approx(0.2)
    assert result.errors["failure_reasons"] == {"bad_tool_json": 2, "max_steps": 1, "no_tool_call": 1, "unknown_tool": 1}


def test_terminate_without_recommendation_is_no_recommendation(world):
    catalog, problems = world

    def policy(messages, tools=None, **params):
        return assistant_message("giving up", [("terminate", {"status": "failure"})], 0)

    with serve(policy, model_name="quitter") as server:
        result = evaluate(server.url, "quitter", problems[:2], catalog, RolloutConfig(samples=1, **FAST))
    assert [ep.failure_reason for ep in result.episodes] == ["no_recommendation"] * 2
    assert all(ep.format_valid and ep.end_reason == "terminate" for ep in result.episodes)


@pytest.mark.parametrize("strict,success,reason", [(True, False, "unknown_tool"), (False, True, None)])
def test_strict_format_after_a_right_recommendation(world, strict, success, reason):
    catalog, problems = world
    oracle = OraclePolicy(problems, catalog)

    def sloppy(messages, tools=None, **params):
        if any(name == "recommend_product" for name, _, _ in tool_history(messages)):
            return assistant_message("done", [("finish", {})], 9)
        return oracle(messages, tools)

    with serve(sloppy, model_name="sloppy") as server:
        cfg = RolloutConfig(samples=1, strict_format=strict, send_seed=False, **FAST)
        [episode] = evaluate(server.url, "sloppy", problems[:1], catalog, cfg).episodes
    assert (episode.success, episode.failure_reason, episode.end_reason) == (success, reason, "unknown_tool")
    assert episode.gt == 1.0 and not episode.format_valid


def test_concurrency_bounds_requests_in_flight(world):
    catalog, problems = world
    oracle, lock, state = OraclePolicy(problems, catalog), threading.Lock(), {"now": 0, "max": 0}

    def counting(messages, tools=None, **params):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.02)
        with lock:
            state["now"] -= 1
        return oracle(messages, tools)

    with serve(counting, model_name="counting") as server:
        result = evaluate(server.url, "counting", problems[:6], catalog, RolloutConfig(samples=2, concurrency=3, **FAST))
    assert state["max"] == 3 and result.metrics["asr"] == 1.0


def test_episode_time_limit(world):
    catalog, problems = world
    with serve(OraclePolicy(problems, catalog), latency_ms=400) as server:
        cfg = RolloutConfig(samples=1, **{**FAST, "request_timeout_s": 5.0, "episode_time_limit_s": 1.0})
        started = time.monotonic()
        result = evaluate(server.url, "oracle", problems[:2], catalog, cfg)
    assert time.monotonic() - started < 3.0
    assert [ep.failure_reason for ep in result.episodes] == ["episode_timeout"] * 2
    assert all(1 <= ep.steps <= 3 for ep in result.episodes)


# -- misbehaving endpoints ------------------------------------------------------------------

class _BadHandler(BaseHTTPRequestHandler):
    mode = "garbage"

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.mode == "hang":
            time.sleep(3)
        status, body = {"garbage": (200, b"{this is not json"), "error": (500, b'{"error": "model crashed"}'),
                        "hang": (200, b"{}")}[self.mode]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize("mode,expect", [("garbage", "malformed response: JSONDecodeError"),
                                         ("error", 'HTTP 500: {"error": "model crashed"}'),
                                         ("hang", "RequestDeadline: request deadline")])
def test_misbehaving_endpoint_gives_endpoint_errors(world, mode, expect):
    catalog, problems = world
    handler = type(f"Handler_{mode}", (_BadHandler,), {"mode": mode})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        started = time.monotonic()
        result = evaluate(f"http://127.0.0.1:{httpd.server_address[1]}", "m", problems[:3], catalog,
                          RolloutConfig(samples=2, **FAST))
        elapsed = time.monotonic() - started
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert elapsed < 6.0
    assert [ep.failure_reason for ep in result.episodes] == ["endpoint_error"] * 6
    assert result.metrics["asr"] == 0.0 and result.errors["endpoint_error_episodes"] == 6
    assert result.errors["failure_reasons"] == {"endpoint_error": 6}
    assert len(result.errors["endpoint_errors"]) >= 1 and expect in result.errors["endpoint_errors"][0]
    retried = 2 if mode != "garbage" else 1  # garbage is not transient: no retry
    assert all(ep.request_failures == retried and ep.steps == 0 for ep in result.episodes)


def test_server_rejects_bad_requests(world):
    catalog, problems = world
    with serve(OraclePolicy(problems, catalog)) as server:
        models = json.loads(urllib.request.urlopen(server.url + "/models", timeout=2).read())
        assert models["data"][0]["id"] == "oracle"
        for body in (b"{nope", b"[]", b'{"messages": []}', b'{"messages": [{"role": "user"}], "max_tokens": "9"}',
                     b'{"messages": [{"role": "user", "content": "x"}], "tools": "all"}'):
            request = urllib.request.Request(server.url + "/chat/completions", data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(request, timeout=2)
            assert info.value.code == 400 and "message" in json.loads(info.value.read())["error"]
        client = openai.OpenAI(base_url=server.url, api_key="local", max_retries=0)
        reply = client.chat.completions.create(model="oracle", messages=[{"role": "user", "content": problems[0].query}])
        assert reply.choices[0].finish_reason == "tool_calls" and reply.usage.completion_tokens > 0
        assert reply.choices[0].message.tool_calls[0].function.name == "find_product"
        unknown = client.chat.completions.create(model="oracle", messages=[{"role": "user", "content": "hello"}])
        assert unknown.choices[0].finish_reason == "stop" and not unknown.choices[0].message.tool_calls


# -- judge ---------------------------------------------------------------------------------------

def test_judge_scores_feed_the_final_score(world):
    catalog, problems = world

    def judge_policy(messages, tools=None, **params):
        ok = "RESULT:" in messages[-1]["content"]  # the judge reads the tool results (its reply parser: test_judge.py)
        return {"role": "assistant", "content": '{"reasoning_quality": 0.7, "explanation": "Gate 4 failed"}' if ok else "no idea"}

    with serve(OraclePolicy(problems, catalog)) as agent, serve(judge_policy, model_name="judge") as judge_server:
        judge = ReasoningJudge(openai.AsyncOpenAI(base_url=judge_server.url, api_key="local", max_retries=0), "judge")
        result = evaluate(agent.url, "oracle", problems[:3], catalog, RolloutConfig(samples=2, **FAST), judge=judge)
    assert [ep.reasoning_score for ep in result.episodes] == [0.7] * 6
    m = result.metrics
    assert m["reasoning_q"] == pytest.approx(0.7) and m["final_score"] == pytest.approx(1.0 * 0.9125)
    assert result.canonical_rows()[0]["reasoning_coef"] == pytest.approx(0.9125)


# -- a tiny transformers model -----------------------------------------------------------------

@pytest.mark.parametrize("text,names,reasoning", [
    ('<think>\nlook\n</think>\n\n<tool_call>\n{"name": "find_product", "arguments": {"q": "bag", "page": 1}}\n</tool_call><|im_end|>',
     ["find_product"], "look"),
    ('<tool_call>[{"name": "recommend_product", "parameters": {"product_ids": "1,2"}}, {"name": "terminate", '
     '"parameters": {"status": "success"}}]</tool_call>', ["recommend_product", "terminate"], ""),
    ('<tool_call>\n{"name": "find_product", "arguments": "{\\"q\\": \\"x\\"}"}\n</tool_call>', ["find_product"], ""),
    ('<tool_call>{"name": "find_product", "arguments": {"q": </tool_call>', [], ""),
    ('<tool_call>{"name": "find_product", "arguments": {}}', [], ""),
    ("just words", [], ""),
])
def test_parse_completion(text, names, reasoning):
    message = parse_completion(text)
    assert [c["function"]["name"] for c in message.get("tool_calls", [])] == names
    assert message.get("reasoning_content", "") == reasoning
    if names:
        assert all(isinstance(json.loads(c["function"]["arguments"]), dict) for c in message["tool_calls"])
    else:
        assert message["content"]  # the raw text survives for the failure reason


def test_tiny_model_served_end_to_end(world, tmp_path_factory):
    from shopdistill_assets.agent.hf_policy import HFPolicy
    from shopdistill_assets.training.tiny_model import build_tiny_model

    catalog, problems = world
    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "qwen3-tiny")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in path.iterdir()}
    policy = HFPolicy(path, max_new_tokens=8)
    assert "<tools>" in policy.prompt([{"role": "user", "content": "hi"}], [{"type": "function", "function": {"name": "f"}}])
    with serve(policy, model_name="tiny") as server:
        cfg = RolloutConfig(samples=1, max_steps=2, max_tokens=8, temperature=0.0,
                            **{**FAST, "request_timeout_s": 30.0})
        result = evaluate(server.url, "tiny", problems[:3], catalog, cfg)
    assert len(result.episodes) == 3 and result.metrics["asr"] == 0.0
    allowed = {"bad_tool_json", "unknown_tool", "no_tool_call", "max_steps", "no_recommendation"}
    assert all(ep.failure_reason in allowed and ep.steps >= 1 for ep in result.episodes)
    assert all(ep.completion_tokens[0] >= 1 for ep in result.episodes)  # usage comes from the real tokenizer
    assert result.errors["endpoint_errors"] == []


def test_sampling_probs_cut_as_the_transformers_warpers():
    import torch
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    from shopdistill_assets.agent.hf_policy import sampling_probs

    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(3)) * 3
    for top_p, top_k in ((None, None), (0.95, None), (None, 20), (0.95, 20), (0.5, 5), (1e-6, None)):
        for row in logits:
            ours = sampling_probs(row, top_p, top_k)
            warped = row[None].clone()
            if top_k is not None:
                warped = TopKLogitsWarper(top_k)(None, warped)
            if top_p is not None:
                warped = TopPLogitsWarper(top_p)(None, warped)
            assert torch.allclose(ours, torch.softmax(warped[0], -1), atol=1e-6)
            assert (ours > 0).sum() <= (top_k or 50) and ours.sum() == pytest.approx(1.0)


def test_server_hands_top_p_and_top_k_to_the_policy():
    seen = []

    def policy(messages, tools=None, **params):
        seen.append(params)
        return {"role": "assistant", "content": "ok"}

    with serve(policy, model_name="p") as server:
        client = openai.OpenAI(base_url=server.url, api_key="local", max_retries=0)
        client.chat.completions.create(model="p", messages=[{"role": "user", "content": "x"}], temperature=0.6)
        client.chat.completions.create(model="p", messages=[{"role": "user", "content": "x"}], temperature=0.6,
                                       top_p=0.9, extra_body={"top_k": 20})
        with pytest.raises(openai.BadRequestError, match="top_p"):
            client.chat.completions.create(model="p", messages=[{"role": "user", "content": "x"}], top_p=1.5)
    assert "top_p" not in seen[0] and "top_k" not in seen[0]  # the checkpoint's defaults then apply
    assert seen[1]["top_p"] == 0.9 and seen[1]["top_k"] == 20 and seen[1]["temperature"] == 0.6


def test_tiny_model_samples_as_its_generation_config_says(tmp_path):
    from shopdistill_assets.agent.hf_policy import BatchedHFPolicy
    from shopdistill_assets.training.tiny_model import QWEN3_SAMPLING, build_tiny_model

    path = build_tiny_model(tmp_path / "qwen3-tiny")
    policy = BatchedHFPolicy(path, max_new_tokens=6, max_batch=2)
    assert policy.sampling == {"top_k": QWEN3_SAMPLING["top_k"], "top_p": QWEN3_SAMPLING["top_p"]}
    assert policy.truncation(None, None) == (0.95, 20) and policy.truncation(1.0, 0) == (None, None)
    messages = [{"role": "user", "content": "find me a bag"}]
    greedy = policy(messages, temperature=0.0)["content"]
    # top_k 1 at a high temperature leaves one token a step: the greedy reply, whatever the seed
    assert {policy(messages, temperature=5.0, top_k=1, seed=s)["content"] for s in range(3)} == {greedy}
    sampled = {policy(messages, temperature=5.0, top_k=0, top_p=1.0, seed=s)["content"] for s in range(3)}
    assert len(sampled) > 1  # untruncated, a random model's replies differ by seed
