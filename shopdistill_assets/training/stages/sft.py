"""SFT on conversational trajectories (sft, resft and teacher_sft stages all run this).

    deepspeed --num_gpus 1 shopdistill_assets/training/stages/sft.py --config stage.yaml [--use_peft --lora_r 16]

Rows: `messages` (a list of OpenAI messages with tool calls, arguments as JSON text) and
`tools` (JSON text); loss on assistant turns only. `only_successful` (default true, the ORO
paper's choice) drops rows whose `score` is below 1 first. Lengths follow the format gate's rule
(14,336 tokens, or a smaller `max_length`): a trajectory over it is dropped (`too_long: drop`),
or keeps its end (`keep_end`: the recommend/terminate turns survive), never silently cut at the
end; the counts, after TRL's own tokenization, go to the report and the lineage.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from shopdistill_assets.training.stages.common import (
    MAX_TOKENS,
    StageArgs,
    adopt_training_template,
    base_revision,
    capped_length,
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

DEFAULTS = {"assistant_only_loss": True, "max_length": MAX_TOKENS, "per_device_train_batch_size": 1,
            "gradient_accumulation_steps": 1, "learning_rate": 5e-5, "num_train_epochs": 1.0, "logging_steps": 1,
            "lr_scheduler_type": "cosine", "warmup_steps": 0.03, "seed": 0, "save_steps": 200, "save_total_limit": 2}
TOO_LONG = ("drop", "keep_end")


@dataclass
class SFTScriptArgs(StageArgs):
    only_successful: bool = field(default=True, metadata={
        "help": "train only on rows whose trajectory scored 1 (the ORO paper's choice)"})
    too_long: str = field(default="drop", metadata={"help": "a row over the length rule: drop | keep_end"})


def successful(rows):
    """The outcome filter: rows whose trajectory scored 1. Rows without a `score` column
    (rollout datasets, already successes only) are kept as they are."""
    if "score" not in rows.column_names:
        return rows
    return rows.filter(lambda score: score is not None and score >= 1.0, input_columns="score")


def fit_length(tokenized, limit: int, policy: str):
    """(rows within `limit` tokens, rows dropped, rows cut). `keep_end` keeps a long row's last
    `limit` tokens (every per-token column alike), so its final recommend/terminate turns stay."""
    if policy not in TOO_LONG:
        raise SystemExit(f"too_long must be one of {TOO_LONG}, got {policy!r}")
    over = sum(1 for ids in tokenized["input_ids"] if len(ids) > limit)
    if policy == "drop":
        return tokenized.filter(lambda ids: len(ids) <= limit, input_columns="input_ids"), over, 0

    def keep_end(row):
        n = len(row["input_ids"])
        return {k: v[n - limit:] if isinstance(v, list) and len(v) == n else v for k, v in row.items()} \
            if n > limit else row

    return tokenized.map(keep_end), 0, over


def train(argv, pipes) -> int:
    from transformers import AutoTokenizer
    from trl import SFTTrainer

    args, config, model_args, _ = parse_stage(SFTScriptArgs, "SFTConfig", DEFAULTS, argv)
    source = local_model(model_args, args, config.output_dir)
    rows = load_rows(args, config.output_dir)
    if rows is None or len(rows) == 0:
        return nothing_to_learn(args, pipes, f"{args.dataset} has no rows")
    read = len(rows)
    rows = successful(rows) if args.only_successful else rows
    if len(rows) == 0:
        return nothing_to_learn(args, pipes, f"{args.dataset} has no successful rows (score >= 1) of {read}")
    limit = capped_length(config, args)
    config.max_length = None  # TRL would keep the start of a long row; fit_length applies the rule instead
    model_init(config, model_args)
    setup_tensorboard(config.output_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    callback = pipes_callback(pipes)
    trainer = SFTTrainer(model=model_args.model_name_or_path, args=config, train_dataset=rows,
                         processing_class=tokenizer, callbacks=[callback, state_callback(args)],
                         peft_config=peft_config(model_args, config))
    template = adopt_training_template(trainer, tokenizer)
    trainer.train_dataset, dropped, cut = fit_length(trainer.train_dataset, limit, args.too_long)
    counts = {"rows_read": read, "rows": len(trainer.train_dataset), "rows_too_long_dropped": dropped,
              "rows_too_long_kept_end": cut}
    if len(trainer.train_dataset) == 0:
        return nothing_to_learn(args, pipes, f"no row of {args.dataset} within {limit} tokens", counts)
    config.max_length = limit
    summary = fit(trainer, callback, args, config.output_dir)
    record = {"effective": effective(config, model_args, args, limit),
              "model": {"source": source, "revision": base_revision(model_args.model_name_or_path)}}
    save_and_publish(args, trainer, {**summary, **counts, "chat_template": template}, pipes, record)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_stage(train, argv)


if __name__ == "__main__":
    sys.exit(main())
