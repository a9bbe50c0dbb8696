"""Teacher-forced next-step match: a dense reading of a policy next to its ASR.

ASR moves only when a whole episode is right. Step match asks, at every step of the fair
policy's trajectory of a held-out problem (run in the sandbox, as the evaluation runs it), what
call the policy makes next given the trajectory so far, and scores that call as ShoppingBench's
step reward scores it (`train.rewards.tool_match_score`: the tool's name, the argument keys, the
argument values). Averaged over the steps of a problem, then over problems, so a long
trajectory does not outweigh a short one.

The prefix the policy sees is the evaluation's own conversation (the same system prompt, tool
schemas and tool-result rendering: `eval.tool_calls.act`), so the number reads the policy as it
will be served. Any policy the evaluation can drive works: a scripted one, a checkpoint through
`eval.hf_policy`, or an endpoint (`endpoint_policy`). A policy error on one step (a prompt past
the context, an endpoint failure) scores that step 0 and is counted, never raised.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from shopdistill_assets.agent.rollout import SYSTEM_PROMPT
from shopdistill_assets.agent.tool_calls import ToolRunner, Trajectory, act
from shopdistill_assets.sandbox.catalog import Catalog
from shopdistill_assets.sandbox.problems import Problem
from shopdistill_assets.sandbox.tool_specs import tool_schemas
from shopdistill_assets.sandbox.tools import Sandbox
from shopdistill_assets.training.stages.rewards import format_score, tool_match_score

ChatPolicy = Callable[..., dict[str, Any]]  # eval.policies.Policy: (messages, tools, **sampling) -> message
MAX_TEACHER_STEPS = 25


@dataclass(frozen=True)
class TeacherStep:
    """One step of the teacher's trajectory: the conversation before it and the call it made."""
    problem_id: str
    prefix: list[dict[str, Any]]
    name: str
    arguments: str  # JSON text, as the conversation stores it


def teacher_steps(problem: Problem, catalog: Catalog, teacher: ChatPolicy | None = None,
                  system_prompt: str = SYSTEM_PROMPT, tool_names: list[str] | None = None) -> list[TeacherStep]:
    """The teacher's (default: the fair policy's) episode on `problem` in the sandbox, cut at each
    of its tool calls."""
    if teacher is None:
        from shopdistill_assets.agent.policies import FairPolicy

        teacher = FairPolicy()
    return asyncio.run(_teacher_episode(problem, catalog, teacher, system_prompt, tool_schemas(tool_names)))


def teacher_conversations(problems: Sequence[Problem], catalog: Catalog,
                          tools: Sequence[str]) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(problem_id, tool, conversation) for each call to one of `tools` the fair policy makes on
    `problems` in the sandbox: the conversation the evaluation serves (system prompt, request, the
    tools' own results) up to and including that call: what the benchmark's base learns from
    (training/arena_base.learn_recommending). The caller passes train-side problems only (distill.py
    takes them from `split.train_side.train_side_truths`, which keeps a problem only when its own
    identity is on the train side)."""
    out = []
    for problem in problems:
        for step in teacher_steps(problem, catalog):
            if step.name in tools:
                call = {"id": "call_r", "type": "function", "function": {"name": step.name, "arguments": step.arguments}}
                out.append((problem.problem_id, step.name,
                            [*step.prefix, {"role": "assistant", "content": "", "tool_calls": [call]}]))
    return out


def recommend_conversations(problems: Sequence[Problem], catalog: Catalog) -> list[tuple[str, list[dict[str, Any]]]]:
    """(problem_id, conversation) for each recommend_product call (`teacher_conversations`)."""
    return [(pid, conversation) for pid, _, conversation in teacher_conversations(problems, catalog,
                                                                                   ("recommend_product",))]


async def _teacher_episode(problem: Problem, catalog: Catalog, teacher: ChatPolicy, system_prompt: str,
                           schemas: list[dict[str, Any]]) -> list[TeacherStep]:
    traj = Trajectory([{"role": "system", "content": system_prompt}, {"role": "user", "content": problem.query}])
    names = {t["function"]["name"] for t in schemas}
    runner = ToolRunner(Sandbox(catalog), timeout_s=10.0, workers=1)
    steps: list[TeacherStep] = []
    try:
        for step in range(MAX_TEACHER_STEPS):
            prefix = [dict(m) for m in traj.messages]
            await act(traj, teacher(traj.messages, schemas, temperature=0.0), step, runner, names,
                      time.monotonic() + 60.0)
            for call in traj.messages[len(prefix)].get("tool_calls") or []:
                steps.append(TeacherStep(problem.problem_id, prefix, call["function"]["name"],
                                         call["function"]["arguments"]))
            if traj.end_reason:
                break
    finally:
        runner.close()
    return steps


def _score(policy: ChatPolicy, step: TeacherStep, schemas: list[dict[str, Any]], seed: int,
           max_tokens: int | None) -> tuple[float, float, bool]:
    """(tool match, format, errored) of the policy's next turn after the step's prefix."""
    try:
        reply = policy([dict(m) for m in step.prefix], schemas, temperature=0.0, max_tokens=max_tokens, seed=seed)
    except Exception:  # the policy's failure is this step's score, not the evaluation's end
        return 0.0, 0.0, True
    completion = [reply] if isinstance(reply, dict) else []
    return tool_match_score(completion, step.name, step.arguments), format_score(completion), False


def step_match(policy: ChatPolicy, problems: Sequence[Problem], catalog: Catalog, *,
               steps_by_problem: dict[str, list[TeacherStep]] | None = None, tool_names: list[str] | None = None,
               max_tokens: int | None = None, seed: int = 0, concurrency: int = 1) -> dict[str, Any]:
    """Mean next-step tool match over the teacher's steps, per problem then over problems
    (greedy decoding: a dense reading, not a sample); `format_valid_steps` is the share of
    steps answered with exactly one well-formed call; `by_tool`, per tool the teacher called, its
    steps, their mean match and the share matched exactly (right tool, keys and every value: for
    a recommendation, the right ids), so a copied id shows apart from the protocol."""
    schemas = tool_schemas(tool_names)
    given = steps_by_problem or {}
    steps = [s for p in problems for s in (given.get(p.problem_id) or teacher_steps(p, catalog, tool_names=tool_names))]
    with ThreadPoolExecutor(max(1, concurrency)) as pool:  # across problems: a batched checkpoint fills its batch
        scores = list(pool.map(lambda s: _score(policy, s, schemas, seed, max_tokens), steps))
    by_problem: dict[str, list[float]] = {}
    by_tool: dict[str, list[float]] = {}
    for step, (match, _, _) in zip(steps, scores):
        by_problem.setdefault(step.problem_id, []).append(match)
        by_tool.setdefault(step.name, []).append(match)
    means = [sum(v) / len(v) for v in by_problem.values()]
    return {"step_match": sum(means) / len(means) if means else None,
            "format_valid_steps": sum(f for _, f, _ in scores) / len(scores) if scores else None,
            "problems": len(means), "steps": len(steps), "policy_errors": sum(e for _, _, e in scores),
            "by_tool": {name: {"steps": len(v), "match": round(sum(v) / len(v), 6),
                               "exact": round(sum(m == 1.0 for m in v) / len(v), 6)}
                        for name, v in sorted(by_tool.items())}}


def endpoint_policy(endpoint: str, model: str, timeout_s: float = 120.0) -> ChatPolicy:
    """An OpenAI-compatible endpoint as a chat policy (one blocking request per step)."""
    import openai

    from shopdistill_assets.agent.rollout import normalize_endpoint

    client = openai.OpenAI(base_url=normalize_endpoint(endpoint), api_key="local", max_retries=1, timeout=timeout_s)

    def ask(messages, tools=None, *, temperature=None, max_tokens=None, seed=None) -> dict[str, Any]:
        completion = client.chat.completions.create(model=model, messages=messages, tools=tools,
                                                    temperature=temperature or 0.0,
                                                    max_tokens=max_tokens or openai.omit, seed=seed)
        return completion.model_dump(warnings=False)["choices"][0]["message"]

    return ask


def chat_policy(spec: Any, problems: Sequence[Problem] = (), catalog: Catalog | None = None,
                max_new_tokens: int = 512, batch_size: int = 1) -> ChatPolicy:
    """The callable behind a registered policy (`policies_registry.PolicySpec`), as `policy_eval`
    serves it: an endpoint, a scripted baseline or a checkpoint."""
    if spec.endpoint:
        return endpoint_policy(spec.endpoint, spec.model or spec.name)
    from shopdistill_assets.agent import policies

    if spec.scripted == "fair":
        return policies.FairPolicy()
    if spec.scripted == "random":
        return policies.RandomPolicy(seed=0)
    if spec.scripted == "oracle":
        return policies.OraclePolicy(problems, catalog)
    from shopdistill_assets.agent.hf_policy import checkpoint_policy

    return checkpoint_policy(spec.checkpoint, max_new_tokens=max_new_tokens, batch_size=batch_size)
