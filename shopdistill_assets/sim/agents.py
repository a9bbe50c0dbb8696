"""Simulated miner agents that act in the sandbox.

Every tool result in a simulated trace comes from a real `Sandbox.call`, and every outcome is
scored by the real scorer. Styles:

- `agentic`: an LLM that decides each step (searches, views, compares, recommends); skill
  decides how often it works carefully (the fair procedure of `eval.fair`: search with every
  stated requirement, take the best result that matches) rather than hastily (brand and type
  only, one of the top hits).
- `subtask`: a Python harness that searches in a loop and asks the LLM only to pick an index;
  its dialogue is written after the fact.
- `decoy`: the same actions as a weak agent, with templated think and no inference at all.
- `broken`: an agentic run with one format fault injected (see FAULTS).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from shopdistill_assets.agent import fair
from shopdistill_assets.sandbox import Problem, Sandbox
from shopdistill_assets.sandbox.scorer import check_item
from shopdistill_assets.sandbox.similarity import LexicalTitleSimilarity
from shopdistill_assets.sandbox.tools import recommend_reply, reference_voucher_arguments, terminate_reply
from shopdistill_assets.sim.problems_gen import LatentProblem

FAULTS = ("unpaired_tool_call", "recommend_count", "bad_product_ids", "too_long", "think_then_stop",
          "malformed_arguments", "unknown_tool")
_SIMILARITY = LexicalTitleSimilarity()


@dataclass
class ToolCall:
    name: str
    parameters: dict[str, Any]
    result: Any = None
    has_result: bool = True


@dataclass
class AgentStep:
    think: str
    calls: list[ToolCall] = field(default_factory=list)
    response: str = ""


@dataclass
class AgentRun:
    style: str
    steps: list[AgentStep]
    fault: str | None = None
    # harness evidence for sub-task runs: searches the Python loop made, picks it asked the LLM for
    harness_searches: list[tuple[dict[str, Any], list[str]]] = field(default_factory=list)
    classify_calls: int = 0
    narrated: bool = False

    def tool_calls(self) -> list[tuple[str, Any]]:
        return [(c.name, c.parameters) for s in self.steps for c in s.calls]


def calculate_voucher(product_prices: Any, voucher_type: str, discount_value: float, threshold: float,
                      budget: float, cap: float = 0) -> dict[str, Any]:
    """ORO's reference agent's calculate_voucher (src/agent/agent.py), a client-side helper: a
    basket of prices, a fixed or percentage voucher from a threshold, a budget."""
    try:
        prices = [float(p) for p in str(product_prices).split(",")]
    except ValueError:
        return {"error": "product_prices must be comma-separated numbers"}
    total = sum(prices)
    applied = total >= threshold
    off = 0.0
    if applied:
        off = discount_value if voucher_type == "fixed" else total * discount_value / 100
        off = min(off, cap) if voucher_type != "fixed" and cap > 0 else off
    return {"prices": prices, "total_before": round(total, 2), "discount_amount": round(off, 2),
            "total_after": round(total - off, 2), "within_budget": total - off <= budget,
            "voucher_applied": applied, "budget": budget}


class Actor:
    """Runs tool calls in the sandbox, keeping the steps an agent took. `calculate_voucher` is
    ORO's client-side helper, run here with ORO's signature; `budget` is the request's."""

    def __init__(self, sandbox: Sandbox, budget: float | None = None) -> None:
        self.sandbox = sandbox
        self.budget = budget
        self.steps: list[AgentStep] = []

    def act(self, think: str, name: str, **parameters: Any) -> Any:
        parameters = {k: v for k, v in parameters.items() if v is not None}
        if name == "calculate_voucher":
            parameters = self._oro_voucher_arguments(parameters)
            result: Any = calculate_voucher(**parameters)
        else:
            result = self.sandbox.call(name, parameters).content()
        self.steps.append(AgentStep(think, [ToolCall(name, parameters, result)]))
        return result

    def _oro_voucher_arguments(self, args: dict[str, Any]) -> dict[str, Any]:
        """A basket by ids and a voucher as the problem states it -> ORO's calculate_voucher arguments."""
        if "product_prices" in args:
            return args
        products = [self.sandbox.catalog.get(pid) for pid in str(args.get("product_ids", "")).split(",")]
        return reference_voucher_arguments([p["price"] for p in products if p], args, self.budget)


def _head(latent: LatentProblem, i: int) -> tuple[str, str]:
    return dict(latent.item_clauses[i])["head"]


_PASS_CACHE: dict[tuple[str, str, int], bool] = {}


def _passes(sandbox: Sandbox, pid: str, expected: dict[str, Any], key: tuple[str, int]) -> bool:
    """Does product `pid` satisfy reward item `key` = (problem_id, index)? Cached: agents ask
    the same question of the same search results thousands of times a day."""
    cache_key = (pid, *key)
    hit = _PASS_CACHE.get(cache_key)
    if hit is None:
        if len(_PASS_CACHE) > 2_000_000:
            _PASS_CACHE.clear()
        hit = _PASS_CACHE[cache_key] = check_item(sandbox.catalog.get(pid), expected, _SIMILARITY).passed
    return hit


def _describe(results: list[dict[str, Any]], k: int = 2) -> str:
    return " and ".join(f"{r['product_id']} '{r['title']}' at {r['price']:.0f} PHP" for r in results[:k])


def _search(actor: Actor, rng: random.Random, latent: LatentProblem, i: int, think: str, **extra: Any) -> list[dict]:
    brand, noun = _head(latent, i)
    q = rng.choice([f"{brand} {noun}", f"{noun} {brand}", noun if rng.random() < 0.2 else f"{brand} {noun}"])
    result = actor.act(think, "find_product", q=q, page=1, **extra)
    return result if isinstance(result, list) else []


def _pick(actor: Actor, rng: random.Random, results: list[dict], view: bool) -> str | None:
    if not results:
        return None
    top = results[: rng.choice([3, 4, 5])]
    if view and len(top) >= 2:
        actor.act(f"Candidates: {_describe(top)}. I will view them to compare attributes and sku options.",
                  "view_product_information", product_ids=",".join(r["product_id"] for r in top))
    return rng.choice(top)["product_id"]


_TERSE = {"find_product": "Searching.", "recommend_product": "Recommending.", "terminate": "Ending."}


def run_careful(problem: Problem, sandbox: Sandbox, terse: bool = False) -> AgentRun:
    """A careful agent: the fair procedure (`eval.fair`), deciding from the request and the tool
    results alone, so its successes teach what a model can learn."""
    actor = Actor(sandbox, (problem.voucher or {}).get("budget"))
    procedure = fair.shop(fair.parse_request(problem.query))
    try:
        action = next(procedure)
        while True:
            think = _TERSE.get(action.name, "Checking.") if terse else action.think
            action = procedure.send(actor.act(think, action.name, **action.arguments))
    except StopIteration:
        pass
    return AgentRun("agentic", actor.steps)


def run_agentic(problem: Problem, latent: LatentProblem, sandbox: Sandbox, rng: random.Random,
                skill: float, terse: bool = False) -> AgentRun:
    """Careful with probability `skill` (the fair procedure); otherwise hasty: it searches the
    brand and type only and takes one of the top results."""
    if rng.random() < skill:
        return run_careful(problem, sandbox, terse)
    actor = Actor(sandbox, (problem.voucher or {}).get("budget"))
    picks: list[str] = []
    shop: str | None = None
    for i in range(len(problem.reward)):
        think = (f"The user wants {' '.join(_head(latent, i))}. I will search the catalog first." if not picks
                 else f"Item {i} is {picks[-1]}. Now searching for the next item, {' '.join(_head(latent, i))}.")
        extra: dict[str, Any] = {}
        if shop and problem.category == "Shop" or (problem.voucher or {}).get("voucher_type") == "shop" and shop:
            extra["shop_id"] = shop
        if problem.category == "Voucher" and rng.random() < skill:
            extra["sort"] = "priceasc"
        results = _search(actor, rng, latent, i, "Searching." if terse else think, **extra)
        pid = _pick(actor, rng, results, view=not terse)
        if pid is None:
            break
        picks.append(pid)
        shop = shop or sandbox.catalog.products[pid]["shop_id"]
    if problem.voucher and picks and rng.random() < skill:
        v = problem.voucher
        actor.act(f"Checking the basket {', '.join(picks)} against the budget of {v['budget']} PHP with the voucher.",
                  "calculate_voucher", product_ids=",".join(picks), voucher_type=v["voucher_type"],
                  threshold=v["threshold"], discount_type=v["discount_type"], face_value=v.get("face_value"),
                  discount=v.get("discount"), cap=v.get("cap"))
    if picks:
        chosen = sandbox.catalog.products[picks[0]]
        reason = ("Recommending." if terse else
                  f"{picks[0]} matches the requested attributes and costs {chosen['price']:.0f} PHP, while the other "
                  f"candidates do not match the brand or the price range. Recommending {','.join(picks)}.")
        actor.act(reason, "recommend_product", product_ids=",".join(picks))
    actor.act("The recommendation is made; ending." if picks else "Nothing matched; ending.", "terminate",
              status="success" if picks else "failure")
    return AgentRun("agentic", actor.steps)


def run_decoy(problem: Problem, latent: LatentProblem, sandbox: Sandbox, rng: random.Random) -> AgentRun:
    run = run_agentic(problem, latent, sandbox, rng, skill=0.2, terse=True)
    for step in run.steps:
        step.think = "Proceeding with the next action."
    run.style = "decoy"
    return run


def run_subtask(problem: Problem, latent: LatentProblem, sandbox: Sandbox, rng: random.Random,
                skill: float) -> AgentRun:
    """A Python loop searches many phrasings and pages; the LLM only picks an index."""
    searches: list[tuple[dict[str, Any], list[str]]] = []
    picks: list[str] = []
    first_results: list[dict] = []
    for i, expected in enumerate(problem.reward):
        brand, noun = _head(latent, i)
        pool: list[dict] = []
        for q in (f"{brand} {noun}", noun, f"{noun} {brand}"):
            for page in range(1, rng.randint(2, 4)):
                params = {"q": q, "page": page}
                result = sandbox.call("find_product", params).content()
                result = result if isinstance(result, list) else []
                searches.append((params, [r["product_id"] for r in result]))
                pool.extend(result)
        first_results = first_results or pool[:10]
        if not pool:
            break
        good = next((r for r in pool if _passes(sandbox, r["product_id"], expected, (problem.problem_id, i))), None)
        picks.append((good if good and rng.random() < skill else rng.choice(pool[:10]))["product_id"])
    steps = [AgentStep(f"Step 1: searched {len(searches)} queries.",
                       [ToolCall("find_product", dict(searches[0][0]) if searches else {"q": problem.query[:40], "page": 1},
                                 first_results)])]
    if picks:
        steps.append(AgentStep("Step 2: selected the candidate index returned by the model.",
                               [ToolCall("recommend_product", {"product_ids": ",".join(picks)}, recommend_reply(",".join(picks)))]))
    steps.append(AgentStep("Step 3: done.", [ToolCall("terminate", {"status": "success"}, terminate_reply("success"))]))
    return AgentRun("subtask", steps, harness_searches=searches, classify_calls=max(1, len(picks)),
                    narrated=rng.random() < 0.4)


def inject_fault(run: AgentRun, fault: str, rng: random.Random) -> AgentRun:
    """Break an agentic run in exactly one way the format gate must catch."""
    steps = run.steps
    rec = next((s for s in steps if s.calls and s.calls[0].name == "recommend_product"), None)
    if fault == "unpaired_tool_call":
        steps[0].calls[0].has_result = False
    elif fault == "recommend_count":
        if rec is not None and rng.random() < 0.5:
            steps.insert(steps.index(rec), AgentStep("Recommending a first option.", [ToolCall(
                "recommend_product", dict(rec.calls[0].parameters),
                recommend_reply(rec.calls[0].parameters.get("product_ids")))]))
        elif rec is not None:
            # the recommend step's think (a careful agent's comparison) moves to the next step, so the
            # judge still sees reasoning over the results and only the format gate has cause to reject
            after = steps.index(rec) + 1
            if after < len(steps):
                steps[after].think = f"{rec.think} {steps[after].think}".strip()
            steps.remove(rec)
    elif fault == "bad_product_ids" and rec is not None:
        rec.calls[0].parameters = {"product_ids": rng.choice(["the first one", "#1, #2", "product A"])}
    elif fault == "too_long":
        steps[0].think += " Let me reconsider every candidate again." * 2400  # ~100k chars
    elif fault == "think_then_stop":
        steps[-1] = AgentStep("I should now double-check the price before I finish, and then")
    elif fault == "malformed_arguments":
        # what the real tool cannot take (a page out of range is not: the server answers no products)
        bad = rng.choice([{"page": "first"}, {"page": True}, {"colour": "red"}, {"q": ["bag"]}])
        steps[0].calls[0].parameters = {**steps[0].calls[0].parameters, **bad}
    elif fault == "unknown_tool":
        steps.insert(1, AgentStep("Let me buy it directly.", [ToolCall("buy_now", {"product_id": "1"}, "Error: unknown tool")]))
    run.style, run.fault = "broken", fault
    return run
