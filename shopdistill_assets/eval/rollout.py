"""Rollouts of a policy behind an OpenAI-compatible endpoint, in the sandbox, scored.

Concurrency is asyncio (`openai.AsyncOpenAI`) with a semaphore bounding episodes in flight:
an episode spends nearly all its time waiting on the endpoint, a sandbox call is well under a
millisecond of numpy, so one event loop keeps hundreds of requests in flight over one shared
connection pool, without a thread per episode and without locks around the sandbox.

Every way an episode can go wrong (endpoint down, garbage replies, malformed tool calls,
timeouts) ends that episode as a scored failure with a `failure_reason`; nothing raises out
of `evaluate` for a misbehaving endpoint.
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

from shopdistill_assets.sandbox.catalog import Catalog
from shopdistill_assets.sandbox.problems import Problem
from shopdistill_assets.sandbox.scorer import score_trace_calls
from shopdistill_assets.core.dialects import SYSTEM_PROMPT as CANONICAL_SYSTEM_PROMPT
from shopdistill_assets.core.dialects import make_trace_id
from shopdistill_assets.sandbox.tool_specs import tool_schemas
from shopdistill_assets.sandbox.tools import Sandbox

DIALECT = "shopdistill.rollout"

# The policy under evaluation sees the same system prompt the training rows carry.
SYSTEM_PROMPT = CANONICAL_SYSTEM_PROMPT

FAILURE_REASONS = ("bad_tool_json", "unknown_tool", "no_tool_call", "max_steps", "episode_timeout",
                   "endpoint_error", "no_recommendation")
# Endings that fail the episode whatever the last recommendation was (malformed output fails
# only under `strict_format`; timeouts and endpoint failures always, as the validator does).
_MALFORMED = frozenset({"bad_tool_json", "unknown_tool", "no_tool_call"})
_ALWAYS_FAIL = frozenset({"episode_timeout", "endpoint_error"})


@dataclass
class RolloutConfig:
    samples: int = 8
    max_steps: int = 25
    concurrency: int = 8
    request_timeout_s: float = 120.0
    retries: int = 2  # extra attempts on timeouts, connection errors, 408/429/5xx
    backoff_s: float = 0.5  # first retry waits this long, doubling, capped at 8 s
    episode_time_limit_s: float = 300.0
    temperature: float = 0.6
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
        from shopdistill_assets.eval.metrics import reasoning_coefficient

        record_id = f"{eval_run_id or ''}:{self.problem_id}:{self.sample}"
        status = {"episode_timeout": "TIMED_OUT", "endpoint_error": "FAILED"}.get(self.end_reason, "SUCCESS")
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


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
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
    if isinstance(exc, openai.OpenAIError):
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    return f"malformed response: {type(exc).__name__}: {str(exc)[:300]}"


def _completion_dict(completion: Any) -> dict[str, Any]:
    """The reply as a dict, or ValueError when it is not a chat completion with a message."""
    raw = completion.model_dump() if hasattr(completion, "model_dump") else completion
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
        try:
            completion = await client.chat.completions.create(
                model=model, messages=messages, tools=tools, temperature=cfg.temperature,
                max_tokens=cfg.max_tokens, seed=seed if cfg.send_seed else openai.omit,
                timeout=min(cfg.request_timeout_s, remaining),
            )
            return _completion_dict(completion), failures
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # classified below; never escapes as anything but EndpointFailure
            failures += 1
            if time.monotonic() >= deadline:
                raise EndpointFailure("episode_timeout", _describe(exc), failures) from None
            if not _transient(exc) or failures > cfg.retries:
                raise EndpointFailure("endpoint_error", _describe(exc), failures) from None
            delay = min(cfg.backoff_s * 2 ** (failures - 1), 8.0, max(deadline - time.monotonic(), 0))
            await asyncio.sleep(delay)


def _assistant_turn(message: dict[str, Any], step: int) -> tuple[dict[str, Any], list[tuple[str, str, Any]]]:
    """Canonical assistant message + (call id, name, raw arguments) per tool call."""
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    turn: dict[str, Any] = {"role": "assistant", "content": content}
    if isinstance(reasoning, str) and reasoning:
        turn["reasoning_content"] = reasoning
    calls, seen_ids = [], set()
    raw_calls = message.get("tool_calls") if isinstance(message.get("tool_calls"), list) else []
    for i, call in enumerate(raw_calls):
        call = call if isinstance(call, dict) else {}
        fn = call.get("function") if isinstance(call.get("function"), dict) else {}
        call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else f"call_{step}_{i}"
        if call_id in seen_ids:  # ids must pair calls with results one to one
            call_id = f"{call_id}_{i}"
        seen_ids.add(call_id)
        args = fn.get("arguments")
        arg_text = args if isinstance(args, str) else json.dumps(args)
        calls.append((call_id, fn.get("name"), args))
        turn.setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function", "function": {"name": str(fn.get("name")), "arguments": arg_text}})
    return turn, calls


def _parse_arguments(args: Any) -> dict[str, Any] | None:
    if args is None or (isinstance(args, str) and not args.strip()):
        return {}
    if isinstance(args, dict):
        return args
    try:
        parsed = json.loads(args) if isinstance(args, str) else None
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


@dataclass
class _Trajectory:
    messages: list[dict[str, Any]]
    calls: list[tuple[str, Any]] = field(default_factory=list)
    end_reason: str = ""
    format_valid: bool = True


def _act(traj: _Trajectory, message: dict[str, Any], step: int, sandbox: Sandbox, tool_names: set[str]) -> None:
    """Append the assistant turn, run its tool calls in the sandbox, set `end_reason` if it ends."""
    turn, calls = _assistant_turn(message, step)
    traj.messages.append(turn)
    if not calls:
        recommended = any(name == "recommend_product" for name, _ in traj.calls)
        if "<tool_call>" in turn["content"]:  # the server could not parse the model's tool call
            traj.end_reason, traj.format_valid = "bad_tool_json", False
        elif recommended and turn["content"].strip():
            traj.end_reason = "stop"  # a closing answer after the recommendation
        else:
            traj.end_reason, traj.format_valid = "no_tool_call", False
        return
    for call_id, name, raw_args in calls:
        if name not in tool_names:
            traj.end_reason, traj.format_valid = "unknown_tool", False
            return
        args = _parse_arguments(raw_args)
        if args is None:
            traj.end_reason, traj.format_valid = "bad_tool_json", False
            return
        result = sandbox.call(name, args)
        traj.calls.append((name, args))
        traj.messages.append({"role": "tool", "tool_call_id": call_id,
                              "content": json.dumps(result.content(), ensure_ascii=False)})
        if name == "terminate":
            traj.end_reason = "terminate"
            return


async def run_episode(client: Any, model: str, problem: Problem, sandbox: Sandbox, cfg: RolloutConfig,
                      seed: int, sample: int = 0) -> Episode:
    """Drive one episode of `problem` through the endpoint behind `client` (an AsyncOpenAI)."""
    started, wall = time.monotonic(), datetime.now(UTC)
    deadline = started + cfg.episode_time_limit_s
    tools = tool_schemas(cfg.tool_names)
    tool_names = {t["function"]["name"] for t in tools}
    traj = _Trajectory([{"role": "system", "content": cfg.system_prompt}, {"role": "user", "content": problem.query}])
    episode = Episode(problem.problem_id, problem.category, problem.query, problem.difficulty, sample, seed, model,
                      started_at=wall.strftime("%Y-%m-%dT%H:%M:%SZ"), tools=tools)
    for step in range(cfg.max_steps):
        t0 = time.monotonic()
        try:
            reply, failures = await _request(client, model, traj.messages, tools, cfg, seed, deadline)
        except EndpointFailure as exc:
            episode.request_failures += exc.attempts
            episode.error, traj.end_reason = exc.message, exc.reason
            break
        episode.model_latency_s += time.monotonic() - t0
        episode.request_failures += failures
        episode.steps += 1
        tokens = reply["usage"].get("completion_tokens")
        episode.completion_tokens.append(tokens if isinstance(tokens, int) else 0)
        _act(traj, reply["message"], step, sandbox, tool_names)
        if traj.end_reason:
            break
    _finish(episode, traj, problem, sandbox.catalog, cfg, started)
    return episode


def _finish(episode: Episode, traj: _Trajectory, problem: Problem, catalog: Catalog, cfg: RolloutConfig,
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
        """The `shopdistill eval` JSON: metrics at top level, plus counts and errors."""
        return {**self.metrics, "model": self.model, "endpoint": self.endpoint, "eval_run_id": self.eval_run_id,
                "errors": self.errors, "wall_s": round(self.wall_s, 3)}

    def canonical_rows(self) -> list[dict[str, Any]]:
        return [ep.to_canonical_row(self.eval_run_id, i + 1) for i, ep in enumerate(self.episodes)]


def error_summary(episodes: Sequence[Episode], first: int = 5) -> dict[str, Any]:
    reasons = Counter(ep.failure_reason for ep in episodes if ep.failure_reason)
    messages: list[str] = []
    for ep in episodes:
        if ep.error and ep.error not in messages and len(messages) < first:
            messages.append(ep.error)
    return {"failure_reasons": dict(sorted(reasons.items())), "endpoint_errors": messages,
            "endpoint_error_episodes": sum(1 for ep in episodes if ep.end_reason == "endpoint_error")}


def normalize_endpoint(endpoint: str) -> str:
    """`http://host:port` → `http://host:port/v1`; a URL with a path is kept as given."""
    endpoint = endpoint.rstrip("/")
    scheme_sep = endpoint.find("://")
    has_path = "/" in endpoint[scheme_sep + 3:] if scheme_sep >= 0 else False
    return endpoint if has_path else endpoint + "/v1"


def default_eval_run_id(model: str, problems: Sequence[Problem], cfg: RolloutConfig) -> str:
    key = json.dumps([model, sorted(p.problem_id for p in problems), cfg.samples, cfg.seed, cfg.temperature])
    return "eval_" + hashlib.sha1(key.encode()).hexdigest()[:16]


async def evaluate_async(endpoint: str, model: str, problems: Sequence[Problem], catalog: Catalog,
                         cfg: RolloutConfig | None = None, *, judge: Any = None, eval_run_id: str | None = None,
                         sandbox: Sandbox | None = None,
                         on_episode: Callable[[Episode], None] | None = None) -> EvalResult:
    from shopdistill_assets.eval.metrics import compute_metrics

    cfg = cfg or RolloutConfig()
    sandbox = sandbox or Sandbox(catalog)
    endpoint = normalize_endpoint(endpoint)
    started = time.monotonic()
    gate = asyncio.Semaphore(max(1, cfg.concurrency))
    client = openai.AsyncOpenAI(base_url=endpoint, api_key="local", max_retries=0, timeout=cfg.request_timeout_s)

    async def one(problem: Problem, sample: int) -> Episode:
        async with gate:
            seed = episode_seed(cfg.seed, problem.problem_id, sample)
            episode = await run_episode(client, model, problem, sandbox, cfg, seed, sample)
            if judge is not None and episode.end_reason not in _ALWAYS_FAIL:
                episode.reasoning_score = await judge.grade(episode)
        if on_episode is not None:
            on_episode(episode)
        return episode

    try:
        episodes = list(await asyncio.gather(*(one(p, s) for p in problems for s in range(cfg.samples))))
    finally:
        await client.close()
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
