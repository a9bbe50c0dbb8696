"""SFT on conversational trajectories (sft, resft and teacher_sft stages all run this).

    deepspeed --num_gpus 1 shopdistill_assets/train/sft.py --config stage.json

Rows: `messages` (a list of OpenAI messages with tool calls, arguments as JSON text) and
`tools` (JSON text); loss on assistant turns only. With `method.only_successful`, rows whose
`score` is below 1 are dropped first (SFT on failed trajectories teaches failure); the counts
before and after go to the report and the lineage. Heavy imports stay inside `main`.
"""

from __future__ import annotations

import sys

from shopdistill_assets.train.common import (
    StageArgs, fit, load_rows, nothing_to_learn, pipes_callback, run_stage, save_and_publish, trainer_kwargs,
)

DEFAULTS = {"assistant_only_loss": True, "max_length": 16384, "per_device_train_batch_size": 1,
            "gradient_accumulation_steps": 1, "learning_rate": 5e-5, "num_train_epochs": 1.0, "logging_steps": 1,
            "lr_scheduler_type": "cosine", "seed": 0}


def successful(rows):
    """The outcome filter (`method.only_successful`): rows whose trajectory scored 1. Rows
    without a `score` column (rollout datasets, already successes only) are kept as they are."""
    if "score" not in rows.column_names:
        return rows
    return rows.filter(lambda score: score is not None and score >= 1.0, input_columns="score")


def train(args: StageArgs, pipes) -> int:
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    rows = load_rows(args)
    if rows is None or len(rows) == 0:
        return nothing_to_learn(args, pipes, f"{args.dataset} has no rows")
    read = len(rows)
    rows = successful(rows) if args.method.get("only_successful") else rows
    if len(rows) == 0:
        return nothing_to_learn(args, pipes, f"{args.dataset} has no successful rows (score >= 1) of {read}")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    config = SFTConfig(**trainer_kwargs(DEFAULTS, args))
    callback = pipes_callback(pipes)
    trainer = SFTTrainer(model=args.model, args=config, train_dataset=rows, processing_class=tokenizer,
                         callbacks=[callback])
    summary = fit(trainer, callback, args)
    save_and_publish(args, trainer, {**summary, "rows": len(rows), "rows_read": read}, pipes)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_stage(train, argv)


if __name__ == "__main__":
    sys.exit(main())
