"""Dr. GRPO on teacher-trajectory steps, rewarded in the sandbox.

    deepspeed --num_gpus 1 shopdistill_assets/training/stages/dr_grpo.py --config stage.yaml

Rows: `prompt` (a teacher trajectory up to one of its assistant turns), the teacher's call at
that turn (`reference_name`, `reference_arguments`), `tools`, and with `episode_reward` the
problem's ground truth (`problem_json`). `loss_type="dr_grpo"` and `scale_rewards="none"`
(Dr. GRPO: no length or std normalisation); rewards: format validity + tool match to the
teacher's next step, and optionally the episode outcome through `ShoppingEnvironment`.

Prompts are rendered with the row's tool schemas by the tokenizer's chat template, the call the
server makes at serving (`evaluation/hf_policy.py`) and TRL makes for SFT/KTO rows, so the policy is
optimized on the context it is served in. Prompts longer than the length rule less the
completion budget are left out (counted); `max_completion_length`, unless given, is derived
from the teacher's own turns (their 95th percentile in tokens, with headroom).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from shopdistill_assets.training.stages.common import (
    StageArgs,
    adopt_training_template,
    base_revision,
    effective,
    fit,
    load_rows,
    local_model,
    model_init,
    nothing_to_learn,
    parse_stage,
    peft_config,
    pipes_callback,
    run_stage,
    save_and_publish,
    setup_tensorboard,
    state_callback,
)

DEFAULTS = {"loss_type": "dr_grpo", "scale_rewards": "none", "num_generations": 4, "per_device_train_batch_size": 4,
            "gradient_accumulation_steps": 1, "learning_rate": 1e-6, "num_train_epochs": 1.0, "logging_steps": 1,
            "beta": 0.0, "temperature": 1.0, "seed": 0, "save_steps": 50, "save_total_limit": 2}


@dataclass
class GRPOScriptArgs(StageArgs):
    episode_reward: bool = field(default=False, metadata={"help": "add the episode outcome from the sandbox"})
    catalog: str | None = field(default=None, metadata={"help": "sandbox catalogue folder (local or s3://)"})
    format_weight: float = 1.0
    tool_match_weight: float = 1.0
    completion_quantile: float = field(default=0.95, metadata={
        "help": "max_completion_length, unless given: this quantile of the teacher's turns, in tokens"})


def reward_setup(args: GRPOScriptArgs, output_dir: str) -> tuple[list, list[float], object | None]:
    from resources.checkpoint_store import fetch
    from shopdistill_assets.training.stages.rewards import ShoppingEnvironment, format_reward, tool_match_reward

    funcs, weights = [format_reward, tool_match_reward], [args.format_weight, args.tool_match_weight]
    environment = None
    if args.episode_reward:
        from shopdistill_assets.sandbox import load_catalog

        if not args.catalog:
            raise SystemExit("dr_grpo: episode_reward needs catalog (the sandbox catalogue folder or s3:// URI)")
        ShoppingEnvironment.catalog = load_catalog(fetch(args.catalog.rstrip("/"), Path(output_dir) / "catalog",
                                                         args.s3_endpoint_url))
        environment = ShoppingEnvironment
    return funcs, weights, environment


def _tools(text: str | None) -> list | None:
    value = json.loads(text) if isinstance(text, str) and text else None
    return value or None


def render_prompt(tokenizer, prompt: list[dict], tools: str | None) -> str:
    """A prompt as the served model sees it: the chat template with the tool schemas."""
    return tokenizer.apply_chat_template(prompt, tools=_tools(tools), add_generation_prompt=True, tokenize=False)


def teacher_turn_tokens(tokenizer, rows) -> list[int]:
    """Token counts of the teacher's assistant turns in the prompts (think, text and calls),
    rendered as the template renders a turn."""
    counts = []
    for prompt in rows["prompt"]:
        for m in prompt:
            if m["role"] != "assistant":
                continue
            text = f"<think>\n{m['reasoning_content']}\n</think>\n\n" if m.get("reasoning_content") else ""
            text += m.get("content") or ""
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                text += f'<tool_call>\n{{"name": "{fn["name"]}", "arguments": {fn["arguments"]}}}\n</tool_call>'
            counts.append(len(tokenizer(text + "<|im_end|>", add_special_tokens=False)["input_ids"]))
    return counts


def completion_budget(counts: list[int], quantile: float, limit: int, fallback: int = 1024) -> int:
    """The quantile of the teacher's turn lengths with 25 % headroom, in multiples of 32; at most
    half the length rule; `fallback` when no teacher turn is seen (first-step prompts only)."""
    if not counts:
        return min(fallback, limit // 2)
    ordered = sorted(counts)
    at = ordered[min(len(ordered) - 1, max(0, math.ceil(quantile * len(ordered)) - 1))]
    return max(64, min(limit // 2, 32 * math.ceil(at * 1.25 / 32)))


def train(argv, pipes) -> int:
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    args, config, model_args, given = parse_stage(GRPOScriptArgs, "GRPOConfig", DEFAULTS, argv)
    source = local_model(model_args, args, config.output_dir)
    rows = load_rows(args, config.output_dir)
    if rows is None or len(rows) == 0:
        return nothing_to_learn(args, pipes, f"{args.dataset} has no rows")
    read = len(rows)
    funcs, weights, environment = reward_setup(args, config.output_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path, padding_side="left")
    if "<tool_call>" in tokenizer.all_special_tokens:  # TRL decodes completions skipping special tokens
        raise SystemExit("dr_grpo: the tokenizer marks <tool_call> as a special token, so the completions the rewards "
                         "score would lose their tool calls and every reward would be 0; mark it as text, as Qwen3 "
                         "does (training/tiny_model.markup_as_text re-saves a tokenizer so)")
    limit = args.max_tokens
    if "max_completion_length" not in given:
        config.max_completion_length = completion_budget(teacher_turn_tokens(tokenizer, rows),
                                                          args.completion_quantile, limit)
    budget = limit - config.max_completion_length
    if environment is None:  # text prompts, rendered with the row's tools (TRL would render none)
        rows = rows.map(lambda r: {"prompt": render_prompt(tokenizer, r["prompt"], r["tools"])})
        fits = rows.filter(lambda p: len(tokenizer(p, add_special_tokens=False)["input_ids"]) <= budget,
                           input_columns="prompt")
    else:  # the environment's tools are the schemas TRL renders
        fits = rows.filter(lambda p, t: len(tokenizer(render_prompt(tokenizer, p, t), add_special_tokens=False)
                                            ["input_ids"]) <= budget, input_columns=["prompt", "tools"])
    counts = {"rows_read": read, "rows": len(fits), "rows_too_long_dropped": read - len(fits),
              "max_completion_length": config.max_completion_length}
    if len(fits) == 0:
        return nothing_to_learn(args, pipes, f"no prompt of {args.dataset} within {budget} tokens", counts)
    config.reward_weights = weights
    model_init(config, model_args)
    setup_tensorboard(config.output_dir)
    callback = pipes_callback(pipes)
    trainer = GRPOTrainer(model=model_args.model_name_or_path, reward_funcs=funcs, args=config, train_dataset=fits,
                          processing_class=tokenizer, callbacks=[callback, state_callback(args)],
                          peft_config=peft_config(model_args, config),
                          **({"environment_factory": environment} if environment is not None else {}))
    template = adopt_training_template(trainer, tokenizer)
    summary = fit(trainer, callback, args, config.output_dir)
    rewards = [x.get("reward") for x in trainer.state.log_history if isinstance(x.get("reward"), (int, float))]
    flat = [x["frac_reward_zero_std"] for x in trainer.state.log_history
            if isinstance(x.get("frac_reward_zero_std"), (int, float))]
    if flat and min(flat) >= 1.0:  # every group's generations scored alike: no advantage, no update from it
        message = ("dr_grpo: every generation of each prompt got the same reward (mean "
                   f"{sum(rewards) / max(1, len(rewards)):.3f}): no learning signal, the policy barely moved")
        print(message, file=sys.stderr)
        if pipes is not None:
            pipes.log.warning(message)
    summary.update(counts, loss_type=config.loss_type, scale_rewards=config.scale_rewards,
                   mean_reward=round(sum(rewards) / len(rewards), 4) if rewards else None,
                   reward_flat_share=round(sum(flat) / len(flat), 4) if flat else None,
                   episode_reward=bool(environment), chat_template=template,
                   prompt_tools="environment" if environment else "dataset")
    record = {"effective": effective(config, model_args, args, limit),
              "model": {"source": source, "revision": base_revision(model_args.model_name_or_path)}}
    save_and_publish(args, trainer, summary, pipes, record)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_stage(train, argv)


if __name__ == "__main__":
    sys.exit(main())
