"""Held-out evaluation: rollouts through an OpenAI-compatible endpoint, metrics, serving.

Plain Python (no Dagster): the eval asset and the `shopdistill serve` / `shopdistill eval`
commands call into these modules. transformers is imported only by `hf_policy` and
`tiny_model`, on use.
"""

from shopdistill_assets.eval.metrics import compute_metrics, metrics_table, pass_at_k, plot_asr, reasoning_coefficient
from shopdistill_assets.eval.policies import OraclePolicy, Policy, RandomPolicy
from shopdistill_assets.eval.rollout import (
    SYSTEM_PROMPT,
    Episode,
    EvalResult,
    RolloutConfig,
    evaluate,
    evaluate_async,
    run_episode,
)
from shopdistill_assets.eval.server import RunningServer, serve, wait_ready

__all__ = [
    "SYSTEM_PROMPT",
    "Episode",
    "EvalResult",
    "OraclePolicy",
    "Policy",
    "RandomPolicy",
    "RolloutConfig",
    "RunningServer",
    "compute_metrics",
    "evaluate",
    "evaluate_async",
    "metrics_table",
    "pass_at_k",
    "plot_asr",
    "reasoning_coefficient",
    "run_episode",
    "serve",
    "wait_ready",
]
