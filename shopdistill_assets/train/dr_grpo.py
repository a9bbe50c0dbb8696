"""Dr. GRPO on teacher-trajectory steps, rewarded in the sandbox.

    deepspeed --num_gpus 1 shopdistill_assets/train/dr_grpo.py --config stage.json

Rows: `prompt` (a teacher trajectory up to one of its assistant turns), the teacher's call at
that turn (`reference_name`, `reference_arguments`), `tools`, and with `method.episode_reward`
the problem's ground truth (`problem_json`). `loss_type="dr_grpo"` and `scale_rewards="none"`
(Dr. GRPO: no length or std normalisation); rewards: format validity + tool match to the
teacher's next step, and optionally the episode outcome through `ShoppingEnvironment`.
"""

from __future__ import annotations

import sys

from shopdistill_assets.train.common import (
    StageArgs, fit, load_rows, nothing_to_learn, pipes_callback, run_stage, save_and_publish, trainer_kwargs,
)

DEFAULTS = {"loss_type": "dr_grpo", "scale_rewards": "none", "num_generations": 4, "max_completion_length": 256,
            "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1, "learning_rate": 1e-6,
            "num_train_epochs": 1.0, "logging_steps": 1, "beta": 0.0, "temperature": 1.0, "seed": 0}
METHOD_DEFAULTS = {"format_weight": 1.0, "tool_match_weight": 1.0, "episode_reward": False, "catalog": None,
                   "max_tool_calling_iterations": 8}


def reward_setup(method: dict) -> tuple[list, list[float], object | None]:
    from shopdistill_assets.train.rewards import ShoppingEnvironment, format_reward, tool_match_reward

    funcs, weights = [format_reward, tool_match_reward], [method["format_weight"], method["tool_match_weight"]]
    environment = None
    if method["episode_reward"]:
        from shopdistill_assets.sandbox import load_catalog

        if not method.get("catalog"):
            raise SystemExit("dr_grpo: method.episode_reward needs method.catalog (the sandbox catalog folder)")
        ShoppingEnvironment.catalog = load_catalog(method["catalog"])
        environment = ShoppingEnvironment
    return funcs, weights, environment


def train(args: StageArgs, pipes) -> int:
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    rows = load_rows(args)
    if rows is None or len(rows) == 0:
        return nothing_to_learn(args, pipes, f"{args.dataset} has no rows")
    method = {**METHOD_DEFAULTS, **args.method}
    funcs, weights, environment = reward_setup(method)
    tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    kwargs = {**trainer_kwargs(DEFAULTS, args), "reward_weights": weights}
    if environment is not None:
        kwargs.setdefault("max_tool_calling_iterations", method["max_tool_calling_iterations"])
    config = GRPOConfig(**kwargs)
    callback = pipes_callback(pipes)
    trainer = GRPOTrainer(model=args.model, reward_funcs=funcs, args=config, train_dataset=rows,
                          processing_class=tokenizer, callbacks=[callback],
                          **({"environment_factory": environment} if environment is not None else {}))
    summary = fit(trainer, callback, args)
    rewards = [x.get("reward") for x in trainer.state.log_history if isinstance(x.get("reward"), (int, float))]
    summary.update(rows=len(rows), loss_type=config.loss_type, scale_rewards=config.scale_rewards,
                   mean_reward=round(sum(rewards) / len(rewards), 4) if rewards else None,
                   episode_reward=bool(environment))
    save_and_publish(args, trainer, summary, pipes)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_stage(train, argv)


if __name__ == "__main__":
    sys.exit(main())
