"""Rollouts of a policy behind an OpenAI-compatible endpoint, in the sandbox, scored.

Concurrency is asyncio (`openai.AsyncOpenAI`) with a semaphore bounding episodes in flight:
an episode spends nearly all its time waiting on the endpoint, so one event loop keeps hundreds
of requests in flight over one shared connection pool. Sandbox tools run off the loop, in a
small thread pool (`tool_calls.ToolRunner`), so a slow tool never stalls other episodes.

Deadlines are wall-clock totals, not per read: each request must complete within
`request_timeout_s` (an endpoint that drips a byte a second is cut there), each tool call within
`tool_timeout_s`, and the whole episode within `episode_time_limit_s`, whatever it waits on.

Every way an episode can go wrong (endpoint down, garbage replies, hostile tool calls,
timeouts, even a bug of ours: `internal_error`) ends that episode as a scored failure with a
`failure_reason`; nothing raises out of `evaluate` for one bad episode.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import openai

from shopdistill_assets.agent.tool_calls import EpisodeDeadline, HarnessError, ToolRunner, Trajectory, act
from shopdistill_assets.corpus.dialects import SYSTEM_PROMPT as CANONICAL_SYSTEM_PROMPT
from shopdistill_assets.corpus.dialects import make_trace_id
from shopdistill_assets.sandbox.catalog import Catalog
from shopdistill_assets.sandbox.math_worker import MathWorkers
from shopdistill_assets.sandbox.problems import Problem
from shopdistill_assets.sandbox.scorer import score_trace_calls
from shopdistill_assets.sandbox.tool_specs import tool_schemas
from shopdistill_assets.sandbox.tools import Sandbox

DIALECT = "shopdistill.rollout"

# The policy under evaluation sees the same system prompt the training rows carry.
SYSTEM_PROMPT = CANONICAL_SYSTEM_PROMPT

FAILURE_REASONS = ("bad_tool_json", "unknown_tool", "no_tool_call", "max_steps", "episode_timeout",
                   "endpoint_error", "internal_error", "no_recommendation")
# Endings that fail the episode whatever the last recommendation was (malformed output fails
# only under `strict_format`; timeouts and endpoint failures always, as the validator does).
_MALFORMED = frozenset({"bad_tool_json", "unknown_tool", "no_tool_call"})
_ALWAYS_FAIL = frozenset({"episode_timeout", "endpoint_error", "internal_error"})


@dataclass
class RolloutConfig:
    samples: int = 8
    max_steps: int = 25
    concurrency: int = 8
    request_timeout_s: float = 120.0  # total per request: connect, wait and the whole body
    retries: int = 2  # extra attempts on timeouts, connection errors, 408/429/5xx
    backoff_s: float = 0.5  # first retry waits this long, doubling, capped at 8 s
    episode_time_limit_s: float = 300.0  # total per episode, requests and tools alike (ORO: 300 s)
    tool_timeout_s: float = 10.0  # per sandbox call; python_execute's worker is killed at it
    temperature: float = 0.6
    top_p: float | None = None  # None: the endpoint's default (ours: the checkpoint's generation_config)
    top_k: int | None = None  # sent as vLLM's `top_k` body field
    max_tokens: int = 2048
    seed: int = 0
    strict_format: bool = True  # a malformed turn fails the episode even after a right recommendation
    send_seed: bool = True  # some hosted APIs reject `seed`
    system_prompt: str = SYSTEM_PROMPT
    tool_names: list[str] | None = None  # None: the sandbox's tools


@dataclass
class Episode:
    problem_id: str
    category: str
    query: str
    difficulty: str
    sample: int
    seed: int
    model: str
    success: bool = False
    gt: float = 0.0
    rule_score: float = 0.0
    score_reason: str = "no_recommendation"
    recommended_ids: list[str] = field(default_factory=list)
    steps: int = 0
    n_tool_calls: int = 0
    end_reason: str = ""
    failure_reason: str | None = None
    format_valid: bool = True
    latency_s: float = 0.0
    model_latency_s: float = 0.0
    request_failures: int = 0
    completion_tokens: list[int] = field(default_factory=list)
    error: str | None = None
    reasoning_score: float | None = None
    started_at: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_canonical_row(self, eval_run_id: str | None = None, source_line: int = 1) -> dict[str, Any]:
        """The brief's canonical trace row (dialect `shopdistill.rollout`)."""
        from shopdistill_assets.agent.metrics import reasoning_coefficient

        record_id = f"{eval_run_id or ''}:{self.problem_id}:{self.sample}"
        status = {"episode_timeout": "TIMED_OUT", "endpoint_error": "FAILED",
                  "internal_error": "FAILED"}.get(self.end_reason, "SUCCESS")
        q = self.reasoning_score
        return {
            "trace_id": trace_id(DIALECT, record_id),
            "eval_run_id": eval_run_id, "problem_id": self.problem_id, "miner_hotkey": None,
            "validator_hotkey": None, "agent_version_id": self.model, "race_id": None, "suite_id": None,
            "phase": "EVAL", "status": status, "category": self.category, "difficulty": self.difficulty or None,
            "query": self.query, "score": 1.0 if self.success else 0.0, "reasoning_score": q,
            "reasoning_coef": reasoning_coefficient(q) if q is not None else None,
            "execution_time": round(self.latency_s, 3), "inference_total": self.steps,
            "inference_failure_count": self.request_failures, "n_steps": self.steps,
            "n_tool_calls": self.n_tool_calls, "updated_at": self.started_at, "dialect": DIALECT,
            "day": self.started_at[:10], "source_file": f"eval/{eval_run_id or 'adhoc'}", "source_line": source_line,
            "messages": json.dumps(self.messages, ensure_ascii=False),
            "tools": json.dumps(self.tools, ensure_ascii=False),
        }


trace_id = make_trace_id  # the normalizer's rule, so rollouts and firehose rows share one id space


def episode_seed(base: int, problem_id: str, sample: int) -> int:
    digest = hashlib.sha1(f"{base}|{problem_id}|{sample}".encode()).hexdigest()
    return int(digest[:8], 16) & 0x7FFFFFFF


class EndpointFailure(Exception):
    def __init__(self, reason: str, message: str, attempts: int) -> None:
        super().__init__(message)
        self.reason, self.message, self.attempts = reason, message, attempts


class RequestDeadline(Exception):
    """No complete reply within the request's total deadline (however the bytes trickled in)."""


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, (openai.APIConnectionError, RequestDeadline)):  # includes APITimeoutError
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code >= 500 or exc.status_code in (408, 429)
    return False


def _describe(exc: BaseException) -> str:
    if isinstance(exc, openai.APIStatusError):
        try:
            body = exc.response.text
        except Exception:  # a streamed or closed body: the client's message is all there is
            body = str(exc.message)
        return f"HTTP {exc.status_code}: {body[:300]}"
    if isinstance(exc, (openai.OpenAIError, RequestDeadline)):
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    return f"malformed response: {type(exc).__name__}: {str(exc)[:300]}"


def _completion_dict(completion: Any) -> dict[str, Any]:
    """The reply as a dict, or ValueError when it is not a chat completion with a message."""
    raw = completion.model_dump(warnings=False) if hasattr(completion, "model_dump") else completion
    choices = raw.get("choices") if isinstance(raw, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError(f"no choices in {str(raw)[:200]}")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ValueError("no message in the first choice")
    usage = raw.get("usage") if isinstance(raw.get("usage"), dict) else {}
    return {"message": message, "usage": usage}


async def _request(client: Any, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   cfg: RolloutConfig, seed: int, deadline: float) -> tuple[dict[str, Any], int]:
    """One chat completion with retries; returns (reply, failed attempts) or raises EndpointFailure."""
    failures = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise EndpointFailure("episode_timeout", "episode time limit reached", failures)
        budget = min(cfg.request_timeout_s, remaining)
        try:
            # the client's timeout is per read (and set past ours so that one rule decides);
            # wait_for makes the budget a total for the whole reply
            completion = await asyncio.wait_for(client.chat.completions.create(
                model=model, messages=messages, tools=tools, temperature=cfg.temperature,
                top_p=openai.omit if cfg.top_p is None else cfg.top_p,
                extra_body=None if cfg.top_k is None else {"top_k": cfg.top_k},
                max_tokens=cfg.max_tokens, seed=seed if cfg.send_seed else openai.omit, timeout=budget + 1.0,
            ), budget)
            return _completion_dict(completion), failures
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # classified below; never escapes as anything but EndpointFailure
            if isinstance(exc, TimeoutError):
                exc = RequestDeadline(f"request deadline: no complete reply within {budget:g} s")
            failures += 1
            if time.monotonic() >= deadline:
                raise EndpointFailure("episode_timeout", _describe(exc), failures) from None
            if not _transient(exc) or failures > cfg.retries:
                raise EndpointFailure("endpoint_error", _describe(exc), failures) from None
            delay = min(cfg.backoff_s * 2 ** (failures - 1), 8.0, max(deadline - time.monotonic(), 0))
            await asyncio.sleep(delay)


async def run_episode(client: Any, model: str, problem: Problem, tools: ToolRunner | Sandbox, cfg: RolloutConfig,
                      seed: int, sample: int = 0) -> Episode:
    """Drive one episode of `problem` through the endpoint behind `client` (an AsyncOpenAI)."""
    if isinstance(tools, Sandbox):  # a bare sandbox: run its calls in a pool of our own
        runner = ToolRunner(tools, cfg.tool_timeout_s, workers=1)
        try:
            return await run_episode(client, model, problem, runner, cfg, seed, sample)
        finally:
            runner.close()
    started, wall = time.monotonic(), datetime.now(UTC)
    deadline = started + cfg.episode_time_limit_s
    schemas = tool_schemas(cfg.tool_names)
    tool_names = {t["function"]["name"] for t in schemas}
    traj = Trajectory([{"role": "system", "content": cfg.system_prompt}, {"role": "user", "content": problem.query}])
    episode = Episode(problem.problem_id, problem.category, problem.query, problem.difficulty, sample, seed, model,
                      started_at=wall.strftime("%Y-%m-%dT%H:%M:%SZ"), tools=schemas)
    try:
        await _steps(client, model, episode, traj, tools, tool_names, cfg, deadline)
    except Exception as exc:  # our bug, not the model's: this episode fails, the evaluation goes on
        traj.end_reason, episode.error = "internal_error", _internal(exc)
    _finish(episode, traj, problem, tools.sandbox.catalog, cfg, started)
    return episode


async def _steps(client: Any, model: str, episode: Episode, traj: Trajectory, tools: ToolRunner,
                 tool_names: set[str], cfg: RolloutConfig, deadline: float) -> None:
    for step in range(cfg.max_steps):
        t0 = time.monotonic()
        try:
            reply, failures = await _request(client, model, traj.messages, episode.tools, cfg, episode.seed, deadline)
        except EndpointFailure as exc:
            episode.request_failures += exc.attempts
            episode.error, traj.end_reason = exc.message, exc.reason
            return
        episode.model_latency_s += time.monotonic() - t0
        episode.request_failures += failures
        episode.steps += 1
        tokens = reply["usage"].get("completion_tokens")
        episode.completion_tokens.append(tokens if isinstance(tokens, int) else 0)
        try:
            await act(traj, reply["message"], step, tools, tool_names, deadline)
        except EpisodeDeadline:
            episode.error, traj.end_reason = "episode time limit reached during a tool call", "episode_timeout"
        if traj.end_reason:
            return


def _internal(exc: BaseException) -> str:
    detail = str(exc) if isinstance(exc, HarnessError) else f"{type(exc).__name__}: {exc}"
    return f"internal error: {detail}"[:400]


def _finish(episode: Episode, traj: Trajectory, problem: Problem, catalog: Catalog, cfg: RolloutConfig,
            started: float) -> None:
    score = score_trace_calls(problem, traj.calls, catalog)
    end = traj.end_reason or "max_steps"
    hard_fail = end in _ALWAYS_FAIL or (cfg.strict_format and end in _MALFORMED)
    episode.success = score.success and not hard_fail
    episode.gt, episode.rule_score, episode.score_reason = score.gt, score.rule_score, score.reason
    episode.recommended_ids = score.recommended_ids
    episode.end_reason, episode.format_valid = end, traj.format_valid
    if not episode.success:
        episode.failure_reason = end if (hard_fail or end in _MALFORMED or end == "max_steps") else score.reason
    episode.n_tool_calls = len(traj.calls)
    episode.messages = traj.messages
    episode.latency_s = time.monotonic() - started


def _failed_episode(problem: Problem, model: str, seed: int, sample: int, exc: BaseException) -> Episode:
    """What is left of an episode whose harness failed outside the step loop."""
    episode = Episode(str(problem.problem_id), str(problem.category), str(problem.query), str(problem.difficulty),
                      sample, seed, model, end_reason="internal_error", failure_reason="internal_error",
                      error=_internal(exc), started_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return episode


@dataclass
class EvalResult:
    model: str
    endpoint: str
    eval_run_id: str
    episodes: list[Episode]
    metrics: dict[str, Any]
    errors: dict[str, Any]
    config: dict[str, Any]
    wall_s: float

    def summary(self) -> dict[str, Any]:
        """The `shopdistill eval` JSON: metrics at top level, plus counts, errors and deadlines.
        `errors.all_endpoint_errors` is true when no episode got a reply (endpoint down)."""
        deadlines = {k: self.config.get(k) for k in ("request_timeout_s", "episode_time_limit_s", "tool_timeout_s")}
        return {**self.metrics, "model": self.model, "endpoint": self.endpoint, "eval_run_id": self.eval_run_id,
                "errors": self.errors, "deadlines": deadlines, "wall_s": round(self.wall_s, 3)}

    def canonical_rows(self) -> list[dict[str, Any]]:
        return [ep.to_canonical_row(self.eval_run_id, i + 1) for i, ep in enumerate(self.episodes)]


def error_summary(episodes: Sequence[Episode], first: int = 5) -> dict[str, Any]:
    reasons = Counter(ep.failure_reason for ep in episodes if ep.failure_reason)
    messages: list[str] = []
    for ep in episodes:
        if ep.error and ep.error not in messages and len(messages) < first:
            messages.append(ep.error)
    endpoint_failed = sum(1 for ep in episodes if ep.end_reason == "endpoint_error")
    return {"failure_reasons": dict(sorted(reasons.items())), "endpoint_errors": messages,
            "episodes": len(episodes), "endpoint_error_episodes": endpoint_failed,
            "all_endpoint_errors": bool(episodes) and endpoint_failed == len(episodes),
            "internal_error_episodes": sum(1 for ep in episodes if ep.end_reason == "internal_error")}


def normalize_endpoint(endpoint: str) -> str:
    """`http://host:port` → `http://host:port/v1`; a URL with a path is kept as given."""
    endpoint = endpoint.rstrip("/")
    scheme_sep = endpoint.find("://")
    has_path = "/" in endpoint[scheme_sep + 3:] if scheme_sep >= 0 else False
    return endpoint if has_path else endpoint + "/v1"


def default_eval_run_id(model: str, problems: Sequence[Problem], cfg: RolloutConfig) -> str:
    cut = [cfg.top_p, cfg.top_k] if (cfg.top_p, cfg.top_k) != (None, None) else []  # ids made before them unchanged
    key = json.dumps([model, sorted(p.problem_id for p in problems), cfg.samples, cfg.seed, cfg.temperature, *cut])
    return "eval_" + hashlib.sha1(key.encode()).hexdigest()[:16]


async def evaluate_async(endpoint: str, model: str, problems: Sequence[Problem], catalog: Catalog,
                         cfg: RolloutConfig | None = None, *, judge: Any = None, eval_run_id: str | None = None,
                         sandbox: Sandbox | None = None,
                         on_episode: Callable[[Episode], None] | None = None) -> EvalResult:
    from shopdistill_assets.agent.metrics import compute_metrics

    cfg = cfg or RolloutConfig()
    endpoint = normalize_endpoint(endpoint)
    started = time.monotonic()
    gate = asyncio.Semaphore(max(1, cfg.concurrency))
    client = openai.AsyncOpenAI(base_url=endpoint, api_key="local", max_retries=0, timeout=cfg.request_timeout_s)
    # A given sandbox is used as it is; our own evaluates python_execute in killable workers.
    math = MathWorkers(size=min(max(1, cfg.concurrency), 4), timeout_s=cfg.tool_timeout_s)
    tools = ToolRunner(sandbox or Sandbox(catalog, math=math.evaluate), cfg.tool_timeout_s, workers=cfg.concurrency)

    async def one(problem: Problem, sample: int) -> Episode:
        seed = 0
        try:
            async with gate:
                seed = episode_seed(cfg.seed, problem.problem_id, sample)
                episode = await run_episode(client, model, problem, tools, cfg, seed, sample)
                if judge is not None and episode.end_reason not in _ALWAYS_FAIL:
                    episode.reasoning_score = await judge.grade(episode)
        except Exception as exc:  # one broken episode never loses the evaluation
            episode = _failed_episode(problem, model, seed, sample, exc)
        if on_episode is not None:
            on_episode(episode)
        return episode

    try:
        episodes = list(await asyncio.gather(*(one(p, s) for p in problems for s in range(cfg.samples))))
    finally:
        await client.close()
        tools.close()
        math.close()
    return EvalResult(model, endpoint, eval_run_id or default_eval_run_id(model, problems, cfg), episodes,
                      compute_metrics(episodes), error_summary(episodes), asdict(cfg), time.monotonic() - started)


def evaluate(endpoint: str, model: str, problems: Sequence[Problem], catalog: Catalog,
             cfg: RolloutConfig | None = None, **kwargs: Any) -> EvalResult:
    """Run `cfg.samples` episodes of every problem against the endpoint; blocking."""
    coro = evaluate_async(endpoint, model, problems, catalog, cfg, **kwargs)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Called from inside a running loop (a notebook, an async asset): run in a fresh thread.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
