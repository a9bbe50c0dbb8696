"""Scripted policies: the ceiling (oracle) and the floor (random) of the evaluation.

A policy is stateless: `policy(messages, tools, temperature=..., max_tokens=..., seed=...)` (and
`top_p=` / `top_k=` where the request gives them; a scripted policy ignores all sampling settings)
returns the next OpenAI-shaped assistant message given the conversation so far, reading its
own earlier tool calls and the tool results back out of `messages`. That is what lets one
policy object serve many concurrent episodes behind the HTTP server.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from shopdistill_assets.sandbox.catalog import Catalog
from shopdistill_assets.sandbox.problems import Problem

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9.\-]*")


class Policy(Protocol):
    name: str

    def __call__(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
    ) -> dict[str, Any]: ...


def normalize_query(text: str) -> str:
    return " ".join(text.split())


def user_query(messages: list[dict[str, Any]]) -> str:
    """The first user turn's text (the problem's query)."""
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    return ""


def tool_history(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], Any]]:
    """(tool name, arguments, parsed result) for each tool call so far, in order."""
    results = {
        m.get("tool_call_id"): m.get("content")
        for m in messages
        if isinstance(m, dict) and m.get("role") == "tool"
    }
    out = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            call = call if isinstance(call, dict) else {}
            fn = call.get("function") if isinstance(call.get("function"), dict) else {}
            args = _loads(fn.get("arguments"))
            out.append((str(fn.get("name")), args if isinstance(args, dict) else {}, _loads(results.get(call.get("id")))))
    return out


def _loads(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: a client's arguments nested deeper than the parser goes
        return text


def assistant_message(think: str, calls: list[tuple[str, dict[str, Any]]], step: int) -> dict[str, Any]:
    """An OpenAI assistant turn with tool calls (arguments as JSON text) and a think."""
    tool_calls = [
        {"id": f"call_{step}_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (name, args) in enumerate(calls)
    ]
    return {"role": "assistant", "content": "", "reasoning_content": think, "tool_calls": tool_calls}


def _n_assistant(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


def _search_results(history: list[tuple[str, dict[str, Any], Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for name, _, result in history:
        if name == "find_product" and isinstance(result, list):
            for item in result:
                if isinstance(item, dict) and item.get("product_id") is not None:
                    seen.setdefault(str(item["product_id"]), item)
    return list(seen.values())


class OraclePolicy:
    """Knows each problem's ground truth (by its query text): searches with words of the reward
    title, recommends the reward ids in order, terminates."""

    name = "oracle"

    def __init__(self, problems_by_query: Mapping[str, Problem] | Iterable[Problem], catalog: Catalog) -> None:
        items = problems_by_query.values() if isinstance(problems_by_query, Mapping) else problems_by_query
        self.problems = {normalize_query(p.query): p for p in items}
        self.catalog = catalog

    def __call__(self, messages, tools=None, *, temperature=None, max_tokens=None, seed=None, top_p=None,
                 top_k=None) -> dict[str, Any]:
        problem = self.problems.get(normalize_query(user_query(messages)))
        if problem is None:
            return {"role": "assistant", "content": "I do not know this request."}
        history = tool_history(messages)
        called = {name for name, _, _ in history}
        step = _n_assistant(messages)
        ids = [str(item.get("product_id", "")) for item in problem.reward]
        if "find_product" not in called:
            q = self._search_words(problem)
            think = f"The user asks: {problem.query[:120]} I will search the catalog for '{q}' first."
            return assistant_message(think, [("find_product", {"q": q, "page": 1})], step)
        if "recommend_product" not in called:
            return assistant_message(self._recommend_think(ids, _search_results(history)),
                                     [("recommend_product", {"product_ids": ",".join(ids)})], step)
        return assistant_message("The recommendation is made; the task is done.", [("terminate", {"status": "success"})], step)

    def _search_words(self, problem: Problem) -> str:
        reward = problem.reward[0]
        titles = reward.get("title") if isinstance(reward.get("title"), list) else []
        product = self.catalog.get(str(reward.get("product_id", "")))
        text = str(titles[0]) if titles else (product["title"] if product else problem.query)
        return " ".join(_WORD.findall(text)[:6]) or "product"

    def _recommend_think(self, ids: list[str], results: list[dict[str, Any]]) -> str:
        by_id = {str(r.get("product_id")): r for r in results}
        parts = [f"The search returned {len(results)} products."]
        for pid in ids:
            product = by_id.get(pid) or self.catalog.get(pid) or {}
            parts.append(f"Product {pid} '{product.get('title', '?')}' at {product.get('price', '?')} PHP "
                         f"from shop {product.get('shop_id', '?')} matches the requirements.")
        others = [r for r in results if str(r.get("product_id")) not in ids][:1]
        for other in others:
            parts.append(f"Product {other.get('product_id')} at {other.get('price')} PHP does not fit as well, "
                         "so I prefer the first choice.")
        return " ".join(parts)


class RandomPolicy:
    """The floor: a search with random words of the query, a random product id seen in the
    results (or a random digit string), then terminate."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def _rng(self, messages: list[dict[str, Any]], seed: int | None) -> random.Random:
        key = f"{self.seed}|{seed}|{user_query(messages)}|{_n_assistant(messages)}"
        return random.Random(hashlib.sha1(key.encode()).hexdigest())

    def __call__(self, messages, tools=None, *, temperature=None, max_tokens=None, seed=None, top_p=None,
                 top_k=None) -> dict[str, Any]:
        rng = self._rng(messages, seed)
        history = tool_history(messages)
        called = {name for name, _, _ in history}
        step = _n_assistant(messages)
        if "find_product" not in called:
            words = _WORD.findall(user_query(messages)) or ["product"]
            q = " ".join(rng.sample(words, k=min(len(words), rng.randint(1, 3))))
            return assistant_message(f"I will search for '{q}'.", [("find_product", {"q": q, "page": 1})], step)
        if "recommend_product" not in called:
            seen = [str(r["product_id"]) for r in _search_results(history)]
            pid = rng.choice(seen) if seen else "".join(rng.choice("0123456789") for _ in range(10))
            return assistant_message(f"I pick product {pid}.", [("recommend_product", {"product_ids": pid})], step)
        return assistant_message("Done.", [("terminate", {"status": "success"})], step)


class FairPolicy:
    """The fair scripted shopper of `eval.fair`: decides from the request and the tool results
    alone (no ground truth), so its ASR is what the arena lets a model reach. Stateless: each
    call replays the procedure over the tool results already in the conversation."""

    name = "fair"

    def __call__(self, messages, tools=None, *, temperature=None, max_tokens=None, seed=None, top_p=None,
                 top_k=None) -> dict[str, Any]:
        from shopdistill_assets.agent.fair import parse_request, shop

        procedure = shop(parse_request(user_query(messages)))
        action = next(procedure)
        try:
            for _name, _args, result in tool_history(messages):
                action = procedure.send(result)
        except StopIteration:
            return {"role": "assistant", "content": "The task is done."}
        return assistant_message(action.think, [(action.name, action.arguments)], _n_assistant(messages))
