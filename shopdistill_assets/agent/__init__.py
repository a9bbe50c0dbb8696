"""The agent in the sandbox: policies, episodes through an OpenAI-compatible endpoint, serving a
checkpoint, the judge and the metrics. Used by evaluation (held-out), training (re-SFT rollouts,
GRPO rewards) and the simulator (the fair teacher).

Plain Python (no Dagster): the eval asset and the `shopdistill serve` / `shopdistill eval`
commands call into these modules. transformers is imported only by `hf_policy` and
`tiny_model`, on use.
"""

from shopdistill_assets.agent.metrics import compute_metrics, metrics_table, pass_at_k, plot_asr, reasoning_coefficient
from shopdistill_assets.agent.policies import OraclePolicy, Policy, RandomPolicy
from shopdistill_assets.agent.rollout import (
    SYSTEM_PROMPT,
    Episode,
    EvalResult,
    RolloutConfig,
    evaluate,
    evaluate_async,
    run_episode,
)
from shopdistill_assets.agent.server import RunningServer, serve, wait_ready

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
