"""KTO on unpaired desirable / undesirable steps.

    deepspeed --num_gpus 1 shopdistill_assets/train/kto.py --config stage.json

Rows: `prompt` (the dialogue before an assistant turn), `completion` ([that turn]), `label`
(True: from a successful, well-reasoned trajectory) and `tools`. The class weights are
rebalanced so that desirable_weight * n_desirable == undesirable_weight * n_undesirable (the
KTO paper's advice: the weighted ratio within [1, 4/3]); beta defaults to the ORO paper's 0.02.
"""

from __future__ import annotations

import sys

from shopdistill_assets.train.common import (
    StageArgs, fit, load_rows, nothing_to_learn, pipes_callback, run_stage, save_and_publish, trainer_kwargs,
)

DEFAULTS = {"beta": 0.02, "max_length": 16384, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1,
            "learning_rate": 5e-7, "num_train_epochs": 1.0, "logging_steps": 1, "seed": 0}


def class_weights(labels: list[bool]) -> dict[str, float]:
    """Weights that give both classes the same total weight (the rarer class is up-weighted)."""
    desirable = sum(1 for x in labels if x)
    undesirable = len(labels) - desirable
    if desirable == 0 or undesirable == 0:
        return {"desirable_weight": 1.0, "undesirable_weight": 1.0}
    if desirable < undesirable:
        return {"desirable_weight": round(undesirable / desirable, 4), "undesirable_weight": 1.0}
    return {"desirable_weight": 1.0, "undesirable_weight": round(desirable / undesirable, 4)}


def train(args: StageArgs, pipes) -> int:
    from transformers import AutoTokenizer
    from trl import KTOConfig, KTOTrainer

    rows = load_rows(args)
    if rows is None or len(rows) == 0:
        return nothing_to_learn(args, pipes, f"{args.dataset} has no rows")
    labels = list(rows["label"])
    if all(labels) or not any(labels):
        return nothing_to_learn(args, pipes, f"KTO needs desirable and undesirable rows; got {sum(labels)} desirable "
                                             f"of {len(labels)}")
    weights = class_weights(labels)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    config = KTOConfig(**{**trainer_kwargs(DEFAULTS, args), **{k: v for k, v in weights.items()
                                                                if k not in args.trainer}})
    callback = pipes_callback(pipes)
    trainer = KTOTrainer(model=args.model, args=config, train_dataset=rows, processing_class=tokenizer,
                         callbacks=[callback])
    summary = fit(trainer, callback, args)
    summary.update(rows=len(rows), desirable=sum(labels), undesirable=len(labels) - sum(labels),
                   desirable_weight=config.desirable_weight, undesirable_weight=config.undesirable_weight,
                   beta=config.beta)
    save_and_publish(args, trainer, summary, pipes)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_stage(train, argv)


if __name__ == "__main__":
    sys.exit(main())
