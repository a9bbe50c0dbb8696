"""KTO on unpaired desirable / undesirable steps.

    deepspeed --num_gpus 1 shopdistill_assets/training/stages/kto.py --config stage.yaml

Rows: `prompt` (the dialogue before an assistant turn), `completion` ([that turn]), `label`
(True: from a successful, well-reasoned trajectory) and `tools`. Rows are written one label
block at a time with a trace's steps adjacent, so they are shuffled (seeded) before training and
the label mix of every batch is reported. Labels are counted after TRL drops rows over the
length rule; the class weights are then rebalanced so that desirable_weight * n_desirable ==
undesirable_weight * n_undesirable (the KTO paper's advice); beta defaults to the ORO paper's 0.02.
"""

from __future__ import annotations

import sys

from shopdistill_assets.training.stages.common import (
    MAX_TOKENS,
    StageArgs,
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
    world_size,
)

DEFAULTS = {"beta": 0.02, "max_length": MAX_TOKENS, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1,
            "learning_rate": 5e-7, "num_train_epochs": 1.0, "logging_steps": 1, "seed": 0, "save_steps": 200,
            "save_total_limit": 2}


def class_weights(labels: list[bool]) -> dict[str, float]:
    """Weights that give both classes the same total weight (the rarer class is up-weighted)."""
    desirable = sum(1 for x in labels if x)
    undesirable = len(labels) - desirable
    if desirable == 0 or undesirable == 0:
        return {"desirable_weight": 1.0, "undesirable_weight": 1.0}
    if desirable < undesirable:
        return {"desirable_weight": round(undesirable / desirable, 4), "undesirable_weight": 1.0}
    return {"desirable_weight": 1.0, "undesirable_weight": round(desirable / undesirable, 4)}


def label_mix(labels: list[bool], batch_size: int) -> dict[str, float]:
    """How many global batches (in training order) hold both labels, and the worst batch's
    share of its rarer label: what a one-label-block-at-a-time order gets wrong."""
    batches = [labels[i:i + batch_size] for i in range(0, len(labels), batch_size)]
    full = [b for b in batches if len(b) > 1]
    mixed = sum(1 for b in full if any(b) and not all(b))
    worst = min((min(sum(b), len(b) - sum(b)) / len(b) for b in full), default=0.0)
    return {"batches": len(full), "batches_with_both_labels": mixed, "worst_minority_share": round(worst, 4)}


def train(argv, pipes) -> int:
    from transformers import AutoTokenizer
    from trl import KTOTrainer

    args, config, model_args, given = parse_stage(StageArgs, "KTOConfig", DEFAULTS, argv)
    source = local_model(model_args, args, config.output_dir)
    rows = load_rows(args, config.output_dir)
    if rows is None or len(rows) == 0:
        return nothing_to_learn(args, pipes, f"{args.dataset} has no rows")
    read = len(rows)
    rows = rows.shuffle(seed=config.seed)  # written label block by label block: mix them
    limit = capped_length(config, args)
    config.max_length = limit
    model_init(config, model_args)
    setup_tensorboard(config.output_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    callback = pipes_callback(pipes)
    trainer = KTOTrainer(model=model_args.model_name_or_path, args=config, train_dataset=rows,
                         processing_class=tokenizer, callbacks=[callback, state_callback(args)],
                         peft_config=peft_config(model_args, config))
    # TRL drops prompts that fill max_length and cuts long completions; a row trains whole or not at all
    trainer.train_dataset = trainer.train_dataset.filter(lambda p, c: len(p) + len(c) <= limit,
                                                         input_columns=["prompt_ids", "completion_ids"])
    labels = [bool(x) for x in trainer.train_dataset["label"]]  # what is trained on, after the length rule
    counts = {"rows_read": read, "rows": len(labels), "desirable": sum(labels),
              "undesirable": len(labels) - sum(labels), "rows_too_long_dropped": read - len(labels)}
    if all(labels) or not any(labels):
        return nothing_to_learn(args, pipes, f"KTO needs desirable and undesirable rows within {limit} tokens; got "
                                             f"{sum(labels)} desirable of {len(labels)}", counts)
    for key, weight in class_weights(labels).items():
        if key not in given:
            setattr(trainer.args, key, weight)
            setattr(trainer, key, weight)
    batch = config.per_device_train_batch_size * config.gradient_accumulation_steps * world_size()
    mix = label_mix(labels, batch)
    if pipes is not None:
        pipes.log.info(f"kto: {mix['batches_with_both_labels']} of {mix['batches']} batches hold both labels")
    summary = fit(trainer, callback, args, config.output_dir)
    summary.update(counts, desirable_weight=trainer.args.desirable_weight,
                   undesirable_weight=trainer.args.undesirable_weight, beta=config.beta, label_mix=mix)
    record = {"effective": effective(config, model_args, args, limit),
              "model": {"source": source, "revision": base_revision(model_args.model_name_or_path)}}
    save_and_publish(args, trainer, summary, pipes, record)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_stage(train, argv)


if __name__ == "__main__":
    sys.exit(main())
