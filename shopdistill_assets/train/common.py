"""What every stage script shares: its config file, the dataset, rank-0 reporting through
Dagster Pipes, and saving + publishing the checkpoint with its lineage.

A stage script is run by the `deepspeed` launcher (locally on CPU over gloo, or in a GPU pod):

    deepspeed --num_gpus 1 shopdistill_assets/train/sft.py --config stage.json

`stage.json` holds a `StageArgs` (paths, lineage from the orchestrator) and `trainer`, the
keyword arguments of the TRL config class (the hyperparameters, recorded in lineage as given).
Run by hand it works the same; without Dagster, reports go to stdout as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


@dataclass
class StageArgs:
    stage: str                      # sft | resft | teacher_sft | kto | dr_grpo
    model: str                      # the parent checkpoint folder, or a Hugging Face id / local path
    dataset: str                    # folder or file of Parquet parts (local, or s3://…)
    output_dir: str                 # work folder; the checkpoint is saved to output_dir/checkpoint
    trainer: dict[str, Any] = field(default_factory=dict)   # TRL config kwargs (hyperparameters)
    deepspeed: dict[str, Any] | str | None = None  # ZeRO config (the dict itself, or a file)
    lineage: dict[str, Any] = field(default_factory=dict)   # from the orchestrator; training facts are added
    publish_to: str | None = None   # checkpoint store root (folder or s3://); None: save only
    s3_endpoint_url: str | None = None
    method: dict[str, Any] = field(default_factory=dict)    # method settings that are not TRL config (e.g. rewards)
    peak_tflops: float | None = None  # accelerator peak (bf16 dense) for MFU; None on CPU

    @classmethod
    def from_file(cls, path: str) -> StageArgs:
        """A JSON file, or `env:NAME` for JSON in an environment variable (how a pod gets it)."""
        text = os.environ.get(path[4:], "") if path.startswith("env:") else Path(path).read_text()
        raw = json.loads(text)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise SystemExit(f"{path}: unknown keys {unknown}")
        return cls(**raw)


def parse_args(argv: list[str] | None = None) -> StageArgs:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="stage JSON file (StageArgs), or env:VARIABLE")
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None, help="set by the deepspeed launcher")
    args = parser.parse_args(argv)
    return StageArgs.from_file(args.config)


def precision_defaults() -> dict[str, Any]:
    """bf16 where the accelerator has it (H100/H200), fp32 on CPU (TRL's configs default to bf16)."""
    import torch

    bf16 = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    return {"bf16": bf16, "fp16": False}


def trainer_kwargs(defaults: dict[str, Any], args: StageArgs) -> dict[str, Any]:
    """The TRL config kwargs: method defaults < precision for this machine < the stage's own."""
    return {**defaults, **precision_defaults(), **args.trainer, "output_dir": args.output_dir,
            "deepspeed": args.deepspeed, "report_to": [], "save_strategy": "no", "disable_tqdm": True}


def rank() -> int:
    return int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")))


# -- reporting ----------------------------------------------------------------------------

class _StdoutPipes:
    """Stand-in for Dagster Pipes when a script runs by hand: JSON lines on stdout."""

    class _Log:
        def info(self, message: str) -> None:
            print(json.dumps({"log": message}), flush=True)

        warning = info

    log = _Log()

    def report_asset_materialization(self, metadata: dict[str, Any] | None = None, data_version: str | None = None,
                                     asset_key: str | None = None) -> None:
        print(json.dumps({"materialization": metadata, "data_version": data_version}, default=str), flush=True)


@contextmanager
def reporting():
    """Dagster Pipes on rank 0 when launched by Dagster; stdout otherwise; nothing on other ranks."""
    if rank() != 0:
        yield None
        return
    from dagster_pipes import PipesEnvVarParamsLoader, open_dagster_pipes

    if PipesEnvVarParamsLoader().is_dagster_pipes_process():
        with open_dagster_pipes() as pipes:
            yield pipes
    else:
        yield _StdoutPipes()


def pipes_callback(pipes: Any):
    """A TrainerCallback that logs every `logging_steps` record through Pipes and keeps the
    losses and token counts for the final report."""
    from transformers import TrainerCallback

    class PipesCallback(TrainerCallback):
        def __init__(self) -> None:
            self.losses: list[float] = []
            self.tokens = 0.0
            self.started = time.monotonic()

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = logs or {}
            if "loss" in logs and isinstance(logs["loss"], (int, float)):
                self.losses.append(float(logs["loss"]))
            if isinstance(logs.get("num_tokens"), (int, float)):
                self.tokens = float(logs["num_tokens"])
            if pipes is not None and state.is_world_process_zero:
                shown = {k: (round(v, 5) if isinstance(v, float) else v) for k, v in logs.items()}
                pipes.log.info(f"step {state.global_step}: {json.dumps(shown, default=str)}")

    return PipesCallback()


# -- data ---------------------------------------------------------------------------------

def dataset_files(dataset: str, s3_endpoint_url: str | None, scratch: Path) -> list[str]:
    """The Parquet parts of a snapshot folder (or one file), local paths; S3 parts are downloaded."""
    if dataset.startswith("s3://"):
        from resources.s3 import make_s3_client

        bucket, _, prefix = dataset[5:].partition("/")
        prefix = prefix.rstrip("/") + "/"  # the folder's own objects, not a sibling sharing its name's start
        client = make_s3_client(endpoint_url=s3_endpoint_url)
        keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                for o in page.get("Contents", []) if o["Key"].endswith(".parquet")]
        files = []
        for key in sorted(keys):
            dest = scratch / "dataset" / key.replace("/", "_")
            dest.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, key, str(dest))
            files.append(str(dest))
        return files
    path = Path(dataset)
    return sorted(str(p) for p in path.glob("*.parquet")) if path.is_dir() else [str(path)]


def load_rows(args: StageArgs):
    """The stage's dataset as a `datasets.Dataset` (conversational columns as they are)."""
    from datasets import load_dataset

    files = dataset_files(args.dataset, args.s3_endpoint_url, Path(args.output_dir))
    if not files:
        return None
    rows = load_dataset("parquet", data_files=files, split="train")
    feature = rows.features.get("messages")
    if getattr(feature, "dtype", None) in ("string", "large_string"):  # a snapshot from before conversational rows
        from shopdistill_assets.train.rows import structured_messages

        rows = rows.map(lambda row: {"messages": structured_messages(row["messages"])})
    return rows


def nothing_to_learn(args: StageArgs, pipes: Any, reason: str) -> int:
    """A stage with no rows ends cleanly, says why, and reports it (no checkpoint)."""
    message = f"{args.stage}: nothing to learn ({reason}); no checkpoint written"
    print(message, file=sys.stderr)
    if pipes is not None:
        pipes.log.warning(message)
        pipes.report_asset_materialization(metadata={"status": "nothing_to_learn", "reason": reason})
    return 0


# -- finishing ----------------------------------------------------------------------------

def model_params(model: Any) -> int:
    params = getattr(model, "parameters", None)
    if params is None:
        return 0
    total = 0
    for p in params():
        total += int(getattr(p, "ds_numel", 0) or p.numel())
    return total


def training_summary(trainer: Any, callback: Any, wall_s: float, peak_tflops: float | None) -> dict[str, Any]:
    state = trainer.state
    tokens = callback.tokens or float(getattr(state, "num_input_tokens_seen", 0) or 0)
    losses = [x for x in callback.losses if math.isfinite(x)]
    tokens_per_s = tokens / wall_s if wall_s > 0 else 0.0
    params = model_params(trainer.model)
    summary = {
        "trained": True, "steps": int(state.global_step), "final_loss": callback.losses[-1] if callback.losses else None,
        "first_loss": callback.losses[0] if callback.losses else None, "losses": callback.losses[-50:],
        "losses_finite": len(losses) == len(callback.losses) and bool(losses), "tokens": int(tokens),
        "tokens_per_s": round(tokens_per_s, 1), "wall_s": round(wall_s, 2), "model_params": params,
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
    }
    if peak_tflops and params:
        # 6 N flops per trained token (forward + backward), across the whole world.
        summary["mfu"] = round(6 * params * tokens_per_s / (peak_tflops * 1e12 * summary["world_size"]), 4)
    return summary


def fit(trainer: Any, callback: Any, args: StageArgs) -> dict[str, Any]:
    """Train and return the run's summary (steps, losses, tokens/s, wall time, MFU where known)."""
    started = time.monotonic()
    trainer.train()
    return training_summary(trainer, callback, time.monotonic() - started, args.peak_tflops)


def run_stage(train: Any, argv: list[str] | None = None) -> int:
    """A stage script's `main`: `train(args, pipes)` reporting through Pipes (rank 0), then the
    local copy of a published checkpoint is dropped."""
    args = parse_args(argv)
    with reporting() as pipes:
        code = train(args, pipes)
    if args.publish_to:
        cleanup(args)
    return code


def save_and_publish(args: StageArgs, trainer: Any, summary: dict[str, Any], pipes: Any) -> None:
    """Save the model + tokenizer (every rank takes part under ZeRO-3), then on rank 0 write the
    lineage and card, publish to the store and report the checkpoint through Pipes."""
    from shopdistill_assets.core.checkpoint_store import CheckpointStore, content_sha256
    from shopdistill_assets.core.lineage import model_card

    out = Path(args.output_dir) / "checkpoint"
    trainer.save_model(str(out))
    if rank() != 0:
        return
    tokenizer = getattr(trainer, "processing_class", None)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out))
    if not list(out.glob("*.safetensors")):
        raise SystemExit(f"{args.stage}: no safetensors written to {out} (ZeRO-3 needs "
                         "stage3_gather_16bit_weights_on_model_save)")
    for junk in ("training_args.bin",):  # pickled, machine-specific: not part of a checkpoint
        (out / junk).unlink(missing_ok=True)
    lineage = {**args.lineage, "stage": args.stage, "hyperparameters": args.trainer, "method": args.method,
               "training": summary}
    sha = content_sha256(out)
    if args.publish_to:
        store = CheckpointStore(args.publish_to, endpoint_url=args.s3_endpoint_url)
        card_lineage = {**lineage, "checkpoint": {"stage": args.stage, "version": sha[:16], "sha256": sha}}
        ref = store.publish(args.stage, out, lineage, model_card(card_lineage))
        uri, version = ref.uri, ref.version
    else:
        uri, version = str(out), sha[:16]
        (out / "lineage.json").write_text(json.dumps(
            {**lineage, "checkpoint": {"stage": args.stage, "version": version, "sha256": sha, "uri": uri}},
            indent=1, sort_keys=True, default=str))
    if pipes is not None:
        pipes.report_asset_materialization(
            metadata={"status": "trained", "version": version, "sha256": sha, "uri": uri,
                      **{k: v for k, v in summary.items() if k != "losses"}},
            data_version=sha)


def cleanup(args: StageArgs) -> None:
    if rank() == 0:
        shutil.rmtree(Path(args.output_dir) / "checkpoint", ignore_errors=True)
