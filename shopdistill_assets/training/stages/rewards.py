"""Dr. GRPO rewards, scored in the sandbox's terms.

Step rewards (the ShoppingBench / ORO recipe): the policy continues a teacher trajectory at
one step and is scored on its next turn alone:
  format_reward      1 when the turn is exactly one well-formed call of a known tool whose
                     arguments satisfy the tool's schema, else 0;
  tool_match_reward  ToolRL-style match against the teacher's call at that step: 0 for another
                     tool, else (1 + key Jaccard + share of the teacher's values matched) / 3.
Episode reward (beyond the paper): `ShoppingEnvironment` exposes the sandbox tools to TRL's
`environment_factory`; the rollout continues with real tool results and `get_reward` scores
the recommendation the policy itself made with the validator's scorer (1 success, 0 otherwise).

Completions are TRL's conversational completions (a list of assistant messages); turns the
tokenizer could not parse into `tool_calls` are parsed here from their `<tool_call>` text.
"""

from __future__ import annotations

import json
from typing import Any

from shopdistill_assets.corpus.gates import argument_error
from shopdistill_assets.sandbox.tool_specs import TOOL_SCHEMAS


def completion_calls(completion: Any) -> list[tuple[str, str]] | None:
    """(name, arguments JSON text) of the tool calls in a completion; None when malformed."""
    from shopdistill_assets.agent.hf_policy import parse_completion

    messages = completion if isinstance(completion, list) else [{"role": "assistant", "content": completion}]
    calls: list[tuple[str, str]] = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role", "assistant") != "assistant":
            continue
        raw = message.get("tool_calls")
        if not raw:
            content = message.get("content") if isinstance(message.get("content"), str) else ""
            if "<tool_call>" not in content:
                continue
            raw = parse_completion(content).get("tool_calls")
            if not raw:
                return None
        for call in raw:
            fn = call.get("function", call) if isinstance(call, dict) else {}
            name, args = fn.get("name"), fn.get("arguments")
            if not isinstance(name, str):
                return None
            calls.append((name, args if isinstance(args, str) else json.dumps(args)))
    return calls


def format_score(completion: Any) -> float:
    calls = completion_calls(completion)
    if not calls or len(calls) != 1:
        return 0.0
    name, args = calls[0]
    return 1.0 if name in TOOL_SCHEMAS and argument_error(name, args) is None else 0.0


def _loads(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def tool_match_score(completion: Any, reference_name: str, reference_arguments: str) -> float:
    calls = completion_calls(completion)
    if not calls or calls[0][0] != reference_name:
        return 0.0
    got, want = _loads(calls[0][1]), _loads(reference_arguments)
    keys = set(got) | set(want)
    key_jaccard = len(set(got) & set(want)) / len(keys) if keys else 1.0
    values = sum(1 for k, v in want.items() if k in got and str(got[k]).strip().lower() == str(v).strip().lower())
    value_share = values / len(want) if want else 1.0
    return round((1.0 + key_jaccard + value_share) / 3.0, 6)


def format_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    return [format_score(c) for c in completions]


def tool_match_reward(completions: list[Any], reference_name: list[str], reference_arguments: list[str],
                      **kwargs: Any) -> list[float]:
    return [tool_match_score(c, n, a) for c, n, a in zip(completions, reference_name, reference_arguments)]


class ShoppingEnvironment:
    """The sandbox as a TRL environment: its public methods are the tools the model may call
    during a GRPO rollout; `reset` loads the example's problem and replays the calls already in
    its prompt; `get_reward` is the validator's verdict on the last recommendation."""

    catalog: Any = None  # set once per process by the script (the catalog is large)

    def __init__(self) -> None:
        from shopdistill_assets.sandbox.tools import Sandbox

        self._sandbox = Sandbox(self.catalog)
        self._problem = None
        self._calls: list[tuple[str, dict[str, Any]]] = []
        self._prefix = 0

    def reset(self, problem_json: str | None = None, prompt: list[dict[str, Any]] | None = None, **_: Any) -> None:
        from shopdistill_assets.sandbox.problems import Problem

        self._problem = Problem.from_dict(json.loads(problem_json)) if problem_json else None
        self._calls = []
        for message in prompt or []:
            for call in (message.get("tool_calls") or []) if isinstance(message, dict) else []:
                self._calls.append((call["function"]["name"], _loads(call["function"]["arguments"])))
        self._prefix = len(self._calls)  # the teacher's calls: context, not the policy's merit
        return None

    def _run(self, name: str, args: dict[str, Any]) -> str:
        args = {k: v for k, v in args.items() if v is not None}
        self._calls.append((name, args))
        result = self._sandbox.call(name, args)
        return json.dumps(result.content(), ensure_ascii=False)

    def find_product(self, q: str, page: int = 1, shop_id: str | None = None, price: str | None = None,
                     sort: str | None = None, service: str | None = None) -> str:
        """Search for products; up to 10 a page with product_id, shop_id, title, price, service, sold_count.

        Args:
            q: Search keywords, e.g. "nike shoes".
            page: Result page, 1 to 5.
            shop_id: Only products of this shop.
            price: Price range "lo-hi", e.g. "0-100".
            sort: Result order: priceasc, pricedesc, order or default.
            service: Comma-joined services: official, freeShipping, COD, flashsale.
        """
        return self._run("find_product", {"q": q, "page": page, "shop_id": shop_id, "price": price, "sort": sort,
                                          "service": service})

    def view_product_information(self, product_ids: str) -> str:
        """Fetch descriptions, SKU options, attributes, price and shop of the given products.

        Args:
            product_ids: Comma-separated product ids, e.g. "123,456".
        """
        return self._run("view_product_information", {"product_ids": product_ids})

    def recommend_product(self, product_ids: str) -> str:
        """Recommend the products to the user, in the order the request lists them; use it exactly once.

        Args:
            product_ids: Comma-separated product ids, e.g. "123,456".
        """
        return self._run("recommend_product", {"product_ids": product_ids})

    def terminate(self, status: str) -> str:
        """End the dialogue and declare the task's completion status.

        Args:
            status: success or failure.
        """
        return self._run("terminate", {"status": status})

    def get_reward(self) -> float:
        from shopdistill_assets.sandbox.scorer import score_trace_calls

        if self._problem is None:
            return 0.0
        own = self._calls[self._prefix:]  # only a recommendation the policy made itself counts
        return 1.0 if score_trace_calls(self._problem, own, self._sandbox.catalog).success else 0.0
