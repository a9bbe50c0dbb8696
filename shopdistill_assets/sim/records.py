"""Render a simulated run as a firehose record: `sn15.problem_run/v1` with proxy calls,
or the two other dialects (`shoppingbench.rollout`, `openai.messages`)."""

from __future__ import annotations

import base64
import hashlib
import random
import re
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote_plus

import orjson

from shopdistill_assets.sandbox import Problem
from shopdistill_assets.sandbox.tool_specs import TOOL_SCHEMAS
from shopdistill_assets.sim.agents import AgentRun

SYSTEM_PROMPT = "You are a shopping assistant. Use tools inside <tool_call></tool_call>."
SEARCH_PATHS = {"find_product": "/search/find_product", "view_product_information": "/search/view_product_information"}
POLICY_MODELS = ["deepseek-ai/DeepSeek-V3.2-TEE", "Qwen/Qwen3-235B-A22B-Instruct-TEE", "zai-org/GLM-4.6-TEE"]
_IDS = re.compile(r"\b\d{6,}\b")
_COMPARE = re.compile(r"\b(while|but|whereas|instead|cheaper|better|than|does not|do not)\b")


def tool_call_id(name: str, parameters: dict[str, Any]) -> str:
    """ORO's id (src/agent/agent_interface.py `generate_tool_call_id`): the first 8 characters of
    the URL-safe base64 MD5 of the name, a newline and the parameters as Python prints them, "="
    dropped. It collides when a call is repeated, as the real one does."""
    digest = hashlib.md5(f"{name}\n{parameters}".encode(), usedforsecurity=False).digest()
    return base64.urlsafe_b64encode(digest).decode().replace("=", "")[:8]


def _call_json(run: AgentRun, step_index: int) -> str:
    calls = [{"name": c.name, "parameters": c.parameters} for c in run.steps[step_index].calls]
    return orjson.dumps(calls).decode()


def _completion_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def judge_gate_tree(run: AgentRun, inference_tokens: list[int]) -> tuple[float, str]:
    """The validator's reasoning gate tree applied to a trace (its LLM judge, made explicit)."""
    if not any(t >= 30 for t in inference_tokens):
        return 0.1, "Gate 1: no inference call with 30 or more completion tokens."
    seen_ids: set[str] = set()
    seen_prices: set[str] = set()
    refers = datum = compare = False
    for step in run.steps:
        mentioned = set(_IDS.findall(step.think))
        if mentioned & seen_ids:
            refers = datum = True
            compare = compare or (len(mentioned & seen_ids) >= 2 and bool(_COMPARE.search(step.think)))
        if any(p in step.think for p in seen_prices):
            datum = True
        for call in step.calls:
            if isinstance(call.result, list):
                for r in call.result:
                    if isinstance(r, dict):
                        seen_ids.add(str(r.get("product_id")))
                        seen_prices.add(f"{r.get('price', 0):.0f}")
    if not refers:
        return 0.3, "Gate 2: the reasoning does not refer to tool results."
    if not datum:
        return 0.5, "Gate 3: no specific datum from the results."
    if not compare:
        return 0.7, "Gate 4: no comparison of two candidates with a reason."
    return 0.9, "Gate 5: compares candidates with specific data."


def _attempt(call: dict, rng: random.Random) -> dict:
    """Newer ORO's per-HTTP-try entry logged beside each call's summary (RequestLog.record_attempt)."""
    return {"kind": "attempt", "method": call["method"], "path": call["path"], "timestamp": call["timestamp"],
            "attempt": 0, "duration_ms": call["duration_ms"], "status_code": 200}


def _inference_call(ts: int, rng: random.Random, content: str, max_tokens: int, extra: dict | None = None) -> dict:
    """One inference call as ORO's RequestLog writes it: the request body without the prompt, the
    whole response (an OpenAI chat completion)."""
    tokens = _completion_tokens(content)
    return {
        "kind": "summary", "method": "POST", "path": "/inference/chat/completions", "timestamp": ts,
        "duration_ms": rng.randint(600, 3000), "status_code": 200,
        "json_data": {"model": rng.choice(POLICY_MODELS), "temperature": 0.2, "max_tokens": max_tokens, **(extra or {})},
        "response": {"id": f"chatcmpl-{ts:x}", "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": content, "reasoning_content": ""}}],
            "usage": {"prompt_tokens": 1800, "completion_tokens": tokens, "total_tokens": 1800 + tokens}},
    }


def _search_call(ts: int, rng: random.Random, name: str, params: dict, result: Any) -> dict:
    """A catalogue call through the proxy: GET with its query parameters (q URL-encoded, as the
    agent's find_product sends it), the whole response, and find_product's product-id index."""
    sent = {k: quote_plus(v) if k == "q" and isinstance(v, str) else v for k, v in params.items()}
    call = {"kind": "summary", "method": "GET", "path": SEARCH_PATHS[name], "timestamp": ts,
            "duration_ms": rng.randint(40, 200), "status_code": 200, "params": sent, "response": result}
    if name == "find_product" and isinstance(result, list):
        call["result_product_ids"] = _result_ids(result)
    return call


def _result_ids(result: Any) -> list[str]:
    return [str(r.get("product_id")) for r in result if isinstance(r, dict)] if isinstance(result, list) else []


def _step(run: AgentRun, k: int, problem: Problem, ts: int, proxy: list[dict]) -> dict:
    step = run.steps[k]
    message: dict[str, Any] = {}
    if step.think:
        message["think"] = step.think
    if step.calls:
        message["tool_call"] = []
        for c in step.calls:
            call = {"name": c.name, "parameters": c.parameters, "tool_call_id": tool_call_id(c.name, c.parameters)}
            if c.has_result:
                call["result"] = c.result
            message["tool_call"].append(call)
    if step.response:
        message["response"] = step.response
    content = f"<think>{step.think}</think>\n" + (f"<tool_call>{_call_json(run, k)}</tool_call>\n" if step.calls else "")
    return {"completion": {"reasoning_content": "", "content": content, "message": message},
            "extra_info": {"step": k, "query": problem.query, "timestamp": ts, "problem_id": problem.problem_id,
                           "proxy_calls": proxy}}


def render_dialogue(run: AgentRun, problem: Problem, start_ms: int, rng: random.Random) -> tuple[list[dict], list[int], int]:
    """Steps with their proxy calls; returns (dialogue, inference completion tokens, end ms)."""
    t = start_ms
    tokens: list[int] = []
    dialogue: list[dict] = []
    if run.style == "subtask":
        proxy: list[dict] = []
        for params, ids in run.harness_searches:  # the harness kept only the ids it saw
            t += rng.randint(60, 250)
            proxy.append(_search_call(t, rng, "find_product", params, [{"product_id": i} for i in ids]))
        for _ in range(run.classify_calls):  # "which index fits best?" -> "2"
            t += rng.randint(300, 900)
            extra = {"response_format": {"type": "json_object"}} if rng.random() < 0.5 else {}
            proxy.append(_inference_call(t, rng, str(rng.randint(0, 9)), rng.choice([4, 8, 16]), extra))
            tokens.append(1)
        if run.narrated:
            text = "I compared the search results and picked the product that best fits the request and budget."
            t += 1500
            proxy.append(_inference_call(t, rng, text, 256))
            tokens.append(_completion_tokens(text))
        for k in range(len(run.steps)):  # written after the fact: every proxy call precedes step 0
            t += rng.randint(5, 40)
            dialogue.append(_step(run, k, problem, t, proxy if k == 0 else []))
        return dialogue, tokens, t
    for k, step in enumerate(run.steps):
        proxy = []
        if run.style != "decoy":
            t += rng.randint(200, 800)
            text = f"<think>{step.think}</think>" + (f"<tool_call>{_call_json(run, k)}</tool_call>" if step.calls else "")
            native = {"tools": [{"type": "function", "function": {"name": n}} for n in ("find_product", "recommend_product")]} \
                if run.fault is None and rng.random() < 0.15 else {}
            proxy.append(_inference_call(t, rng, text, 2048, native))
            tokens.append(_completion_tokens(text))
            t += proxy[-1]["duration_ms"]
        for c in step.calls:
            if c.name in SEARCH_PATHS and isinstance(c.parameters, dict):
                t += rng.randint(50, 300)
                proxy.append(_search_call(t, rng, c.name, dict(c.parameters), c.result))
        if rng.random() < 0.3:  # newer ORO logs each HTTP try too: not calls of their own
            proxy = [e for c in proxy for e in (_attempt(c, rng), c)]
        t += rng.randint(300, 1200)
        dialogue.append(_step(run, k, problem, t, proxy))
    return dialogue, tokens, t


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def shoppingbench_rollout(run: AgentRun, problem: Problem, start_ms: int) -> list[dict]:
    """Upstream ShoppingBench rollout: results come back in the next step's prompt in <obs>."""
    history = f"# Dialogue Records History\nUser: {problem.query}\n"
    out = []
    for k, step in enumerate(run.steps):
        calls = [{"name": c.name, "parameters": c.parameters, "tool_call_id": tool_call_id(c.name, c.parameters)}
                 for c in step.calls]
        out.append({
            "prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": history}],
            "completion": {"reasoning_content": step.think,
                           "content": f"<think>{step.think}</think>\n<tool_call>{orjson.dumps(calls).decode()}</tool_call>\n",
                           "message": {"think": step.think, "tool_call": calls, "response": step.response}},
            "extra_info": {"step": k, "query": problem.query, "timestamp": start_ms + 10_000 * (k + 1)},
        })
        for c in step.calls:
            history += (f"Assistant: {orjson.dumps({'name': c.name, 'parameters': c.parameters}).decode()}\n"
                        f"<obs>{orjson.dumps(c.result).decode()}</obs>\n")
    return out


def openai_messages(run: AgentRun, problem: Problem, record_id: str) -> dict:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                      {"role": "user", "content": problem.query}]
    used: list[str] = []
    for k, step in enumerate(run.steps):
        calls = [{"id": f"call_{k}_{j}", "type": "function",
                  "function": {"name": c.name, "arguments": orjson.dumps(c.parameters).decode()}}
                 for j, c in enumerate(step.calls)]
        messages.append({"role": "assistant", "content": step.response, "reasoning_content": step.think,
                         "tool_calls": calls})
        for call, c in zip(calls, step.calls):
            used.append(c.name)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": orjson.dumps(c.result).decode()})
    tools = [TOOL_SCHEMAS[n] for n in dict.fromkeys(used) if n in TOOL_SCHEMAS]
    return {"id": record_id, "messages": messages, "tools": tools,
            "source": {"dataset": "simulated-sn15-sft", "problem_id": problem.problem_id}}
