"""What every stage script shares: typed configs (TRL's way), the dataset, the length rule,
rank-0 reporting through Dagster Pipes, resumable state, and saving + publishing the checkpoint.

A stage script is run by the `deepspeed` launcher (locally on CPU over gloo, or in a GPU pod):

    deepspeed --num_gpus 8 shopdistill_assets/training/stages/sft.py --config s3://models/ckpt/.runs/sft/<run>/stage.yaml

`--config` is a YAML file (a local path or an s3:// object: the config travels by reference, not
in the environment) read by TRL's `TrlParser` into three dataclasses: the script's own
(`StageArgs` or a method's subclass: paths, lineage, method settings), the method's TRL config
(`SFTConfig`, `KTOConfig`, `GRPOConfig`) and `ModelConfig` (`model_name_or_path`, `use_peft`,
`lora_r`, …). Any key may also be given on the command line (`--learning_rate 1e-5`). Run by
hand it works the same; without Dagster, reports go to stdout as JSON lines.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shopdistill_assets.corpus.gates import GateConfig

# The one length rule: what the format gate accepts (ShoppingBench rejects longer trajectories).
MAX_TOKENS = GateConfig.max_tokens
TENSORBOARD_DIR = "runs"  # TensorBoard event files, inside the checkpoint folder (not part of its content hash)
# What lineage records as the run's effective values (the TRL config after defaults and overrides).
EFFECTIVE_KEYS = ("learning_rate", "lr_scheduler_type", "warmup_steps", "num_train_epochs", "max_steps",
                  "per_device_train_batch_size", "gradient_accumulation_steps", "max_length", "max_completion_length",
                  "num_generations", "beta", "loss_type", "scale_rewards", "seed", "bf16", "gradient_checkpointing",
                  "save_steps", "report_to", "desirable_weight", "undesirable_weight", "use_vllm", "vllm_mode")
MODEL_KEYS = ("model_name_or_path", "model_revision", "dtype", "use_peft", "lora_r", "lora_alpha", "lora_dropout",
              "lora_target_modules")


@dataclass
class StageArgs:
    """The script's own config: what the orchestrator tells a stage besides TRL's settings."""

    stage: str = field(default="", metadata={"help": "sft | resft | teacher_sft | kto | dr_grpo"})
    dataset: str = field(default="", metadata={"help": "folder or file of Parquet parts (local, or s3://…)"})
    publish_to: str | None = field(default=None, metadata={"help": "checkpoint store root (folder or s3://)"})
    s3_endpoint_url: str | None = field(default=None, metadata={"help": "S3-compatible endpoint"})
    lineage: dict = field(default_factory=dict, metadata={"help": "from the orchestrator; training facts are added"})
    peak_tflops: float | None = field(default=None, metadata={"help": "per-accelerator bf16 dense peak for MFU"})
    max_tokens: int = field(default=MAX_TOKENS, metadata={"help": "the format gate's length rule (tokens)"})
    state_uri: str | None = field(default=None, metadata={
        "help": "where resumable checkpoints go (every save_steps) and are resumed from on a retry"})


# -- parsing ------------------------------------------------------------------------------

def machine_defaults() -> dict[str, Any]:
    """bf16 where the accelerator has it (H100/H200), fp32 on CPU (TRL's configs default to bf16);
    training curves to TensorBoard unless the user says otherwise (`report_to`)."""
    import torch

    bf16 = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    return {"bf16": bf16, "fp16": False, "report_to": ["tensorboard"], "disable_tqdm": True}


def _config_arg(argv: list[str]) -> tuple[int, str] | None:
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return i + 1, argv[i + 1]
        if arg.startswith("--config="):
            return i, arg.split("=", 1)[1]
    return None


def local_config(argv: list[str], defaults: dict[str, Any]) -> tuple[list[str], set[str]]:
    """The argv TrlParser reads: `--config` fetched when it is an s3:// object, with the method's
    and the machine's defaults beneath its keys. Also returns the keys the user gave (YAML + CLI),
    so a default derived from the data (max_completion_length) never overrides a given one."""
    import yaml

    from resources.checkpoint_store import fetch

    found = _config_arg(argv)
    given: dict[str, Any] = {}
    scratch = Path(tempfile.mkdtemp(prefix="stage-config-"))
    if found:
        endpoint = os.environ.get("SHOPDISTILL_S3_ENDPOINT_URL") or None
        text = fetch(found[1], scratch / "given.yaml", endpoint).read_text()
        given = yaml.safe_load(text) or {}
        if not isinstance(given, dict):
            raise SystemExit(f"{found[1]}: a stage config is a YAML mapping")
    flags = {a[2:].split("=", 1)[0] for a in argv if a.startswith("--")} - {"config"}
    merged = {**defaults, **machine_defaults(), **given}
    if not merged.get("state_uri"):  # nowhere to keep resumable state: no intermediate saves
        merged.setdefault("save_strategy", "no")
    path = scratch / "stage.yaml"
    path.write_text(yaml.safe_dump(merged, sort_keys=True))
    skip = set() if not found else ({found[0]} if argv[found[0]].startswith("--config=") else {found[0] - 1, found[0]})
    rest = [a for i, a in enumerate(argv) if i not in skip]
    return ["--config", str(path), *rest], set(given) | flags


def parse_stage(script_class: type, config_name: str, defaults: dict[str, Any], argv: list[str] | None = None):
    """(script args, TRL config, ModelConfig, keys the user gave) for a stage script."""
    import trl
    from trl import ModelConfig, TrlParser

    argv = list(sys.argv[1:] if argv is None else argv)
    argv, given = local_config(argv, defaults)
    parser = TrlParser((script_class, getattr(trl, config_name), ModelConfig))
    script, config, model_args = parser.parse_args_and_config(argv)
    if not model_args.model_name_or_path:
        raise SystemExit(f"{script.stage or 'stage'}: model_name_or_path is required")
    return script, config, model_args, given


def rank() -> int:
    return int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


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
    loss curve (step, loss) and token counts for the final report."""
    from transformers import TrainerCallback

    class PipesCallback(TrainerCallback):
        def __init__(self) -> None:
            self.curve: list[tuple[int, float]] = []
            self.tokens = 0.0
            self.started = time.monotonic()

        @property
        def losses(self) -> list[float]:
            return [loss for _, loss in self.curve]

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = logs or {}
            if "loss" in logs and isinstance(logs["loss"], (int, float)):
                self.curve.append((int(state.global_step), float(logs["loss"])))
            if isinstance(logs.get("num_tokens"), (int, float)):
                self.tokens = float(logs["num_tokens"])
            if pipes is not None and state.is_world_process_zero:
                shown = {k: (round(v, 5) if isinstance(v, float) else v) for k, v in logs.items()}
                pipes.log.info(f"step {state.global_step}: {json.dumps(shown, default=str)}")

    return PipesCallback()


def downsample(curve: list[tuple[int, float]], points: int = 200) -> list[list[float]]:
    """At most `points` (step, loss) pairs, evenly spaced, the last one kept: small enough for lineage."""
    if len(curve) <= points:
        return [[s, v] for s, v in curve]
    stride = len(curve) / points
    picked = [curve[int(i * stride)] for i in range(points - 1)] + [curve[-1]]
    return [[s, v] for s, v in picked]


# -- data ---------------------------------------------------------------------------------

def dataset_files(dataset: str, s3_endpoint_url: str | None, scratch: Path) -> list[str]:
    """The Parquet parts of a snapshot folder (or one file), local paths; S3 parts are downloaded."""
    if dataset.startswith("s3://"):
        from resources.s3 import list_objects, make_s3_client

        bucket, _, prefix = dataset[5:].partition("/")
        prefix = prefix.rstrip("/") + "/"  # the folder's own objects, not a sibling sharing its name's start
        client = make_s3_client(endpoint_url=s3_endpoint_url)
        keys = [o["Key"] for o in list_objects(client, bucket, prefix) if o["Key"].endswith(".parquet")]
        files = []
        for key in sorted(keys):
            dest = scratch / "dataset" / key.replace("/", "_")
            dest.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, key, str(dest))
            files.append(str(dest))
        return files
    path = Path(dataset)
    return sorted(str(p) for p in path.glob("*.parquet")) if path.is_dir() else [str(path)]


def load_rows(args: StageArgs, output_dir: str):
    """The stage's dataset as a `datasets.Dataset` (conversational columns as they are)."""
    from datasets import load_dataset

    files = dataset_files(args.dataset, args.s3_endpoint_url, Path(output_dir))
    if not files:
        return None
    rows = load_dataset("parquet", data_files=files, split="train")
    feature = rows.features.get("messages")
    if getattr(feature, "dtype", None) in ("string", "large_string"):  # a snapshot from before conversational rows
        from shopdistill_assets.corpus.messages import structured_messages

        rows = rows.map(lambda row: {"messages": structured_messages(row["messages"])})
    return rows


def local_model(model_args: Any, args: StageArgs, output_dir: str) -> str:
    """The parent model as a local folder: an s3:// checkpoint is fetched inside the stage (a pod
    shares no folder with the orchestrator); a path or Hugging Face id is used as it is."""
    from resources.checkpoint_store import fetch

    source = model_args.model_name_or_path
    if source.startswith("s3://"):
        model_args.model_name_or_path = str(fetch(source.rstrip("/"), Path(output_dir) / "parent-model",
                                                  args.s3_endpoint_url))
    return source


def capped_length(config: Any, args: StageArgs) -> int:
    """The stage's token limit: the format gate's rule, or a smaller `max_length` the user set."""
    limit = int(getattr(config, "max_length", None) or args.max_tokens)
    return min(limit, args.max_tokens)


def nothing_to_learn(args: StageArgs, pipes: Any, reason: str, counts: dict[str, Any] | None = None) -> int:
    """A stage with no rows (before or after the trainer's own filtering) ends cleanly, says why,
    and reports it: no checkpoint, so the orchestrator records `trained: false`."""
    message = f"{args.stage}: nothing to learn ({reason}); no checkpoint written"
    print(message, file=sys.stderr)
    if pipes is not None:
        pipes.log.warning(message)
        pipes.report_asset_materialization(metadata={"status": "nothing_to_learn", "reason": reason, **(counts or {})})
    return 0


def model_init(config: Any, model_args: Any) -> None:
    """ModelConfig's loading settings as the trainer's `model_init_kwargs` (the TRL scripts' way)."""
    kwargs = {"revision": model_args.model_revision, "trust_remote_code": False,
              "attn_implementation": model_args.attn_implementation}
    if model_args.dtype not in (None, "auto"):
        kwargs["dtype"] = model_args.dtype
    config.model_init_kwargs = {**(config.model_init_kwargs or {}), **{k: v for k, v in kwargs.items() if v is not None}}


def peft_config(model_args: Any, config: Any):
    """LoRA when `use_peft` (a flag); the adapter is merged into the weights at save, so every
    checkpoint of the chain is a full model. The merge needs the whole model on rank 0: ZeRO-2."""
    if not model_args.use_peft:
        return None
    stage3 = isinstance(config.deepspeed, dict) and config.deepspeed.get("zero_optimization", {}).get("stage") == 3
    if stage3:
        raise SystemExit("use_peft: LoRA is merged into the checkpoint at save, which needs ZeRO-2 (deepspeed zero2)")
    from trl import get_peft_config

    return get_peft_config(model_args)


# -- resumable state ----------------------------------------------------------------------

def resume_point(args: StageArgs, output_dir: str) -> str | None:
    """The newest complete checkpoint-N saved to `state_uri` by an earlier try, fetched locally."""
    if not args.state_uri or not args.publish_to:
        return None
    from resources.checkpoint_store import CheckpointStore, fetch

    store = CheckpointStore(args.publish_to, endpoint_url=args.s3_endpoint_url)
    done = [n for n in store.children(args.state_uri) if n.startswith("checkpoint-") and n[11:].isdigit()
            and _complete(store, f"{args.state_uri}/{n}")]
    if not done:
        return None
    newest = max(done, key=lambda n: int(n[11:]))
    local = Path(output_dir) / "resume" / newest
    if not args.state_uri.startswith("s3://"):
        return str(Path(args.state_uri) / newest)
    return str(fetch(f"{args.state_uri}/{newest}", local, args.s3_endpoint_url))


def _complete(store: Any, uri: str) -> bool:
    """A saved step counts once its marker is there (written after every file)."""
    return store.exists(f"{uri}/COMPLETE")


def state_callback(args: StageArgs):
    """After each save (every `save_steps`), rank 0 copies checkpoint-N to `state_uri`, marker last,
    then drops the older steps there (only the newest complete one is resumed from)."""
    from transformers import TrainerCallback

    class StateCallback(TrainerCallback):
        def on_save(self, targs, state, control, **kwargs):
            if not args.state_uri or not args.publish_to or not state.is_world_process_zero:
                return
            from resources.checkpoint_store import CheckpointStore

            name = f"checkpoint-{state.global_step}"
            folder = Path(targs.output_dir) / name
            if folder.is_dir():
                store = CheckpointStore(args.publish_to, endpoint_url=args.s3_endpoint_url)
                store.upload_tree(folder, f"{args.state_uri}/{name}")
                store.put_text(f"{args.state_uri}/{name}/COMPLETE", str(state.global_step))
                for old in store.children(args.state_uri):
                    if old.startswith("checkpoint-") and old != name:
                        store.remove_tree(f"{args.state_uri}/{old}")

    return StateCallback()


# -- finishing ----------------------------------------------------------------------------

def model_params(model: Any) -> int:
    params = getattr(model, "parameters", None)
    if params is None:
        return 0
    total = 0
    for p in params():
        total += int(getattr(p, "ds_numel", 0) or p.numel())
    return total


def flops_per_token(params: int, layers: int, hidden: int, seq_len: float) -> float:
    """Training FLOPs per token: 6 N for the weights (forward + backward) plus the attention
    scores and values, 12 · layers · hidden · sequence length (PaLM's MFU, appendix B)."""
    return 6.0 * params + 12.0 * layers * hidden * seq_len


def training_summary(trainer: Any, callback: Any, wall_s: float, peak_tflops: float | None,
                     samples: int | None = None) -> dict[str, Any]:
    state = trainer.state
    tokens = callback.tokens or float(getattr(state, "num_input_tokens_seen", 0) or 0)
    losses = [x for x in callback.losses if math.isfinite(x)]
    tokens_per_s = tokens / wall_s if wall_s > 0 else 0.0
    params = model_params(trainer.model)
    summary = {
        "trained": int(state.global_step) > 0, "steps": int(state.global_step),
        "final_loss": callback.losses[-1] if callback.losses else None,
        "first_loss": callback.losses[0] if callback.losses else None, "losses": callback.losses[-50:],
        "loss_curve": downsample(callback.curve), "losses_finite": len(losses) == len(callback.losses) and bool(losses),
        "tokens": int(tokens), "tokens_per_s": round(tokens_per_s, 1), "wall_s": round(wall_s, 2),
        "model_params": params, "world_size": world_size(),
    }
    if peak_tflops and params:
        cfg = getattr(trainer.model, "config", None)
        seq = tokens / samples if samples else 0.0
        per_token = flops_per_token(params, int(getattr(cfg, "num_hidden_layers", 0) or 0),
                                    int(getattr(cfg, "hidden_size", 0) or 0), seq)
        summary["mfu"] = round(per_token * tokens_per_s / (peak_tflops * 1e12 * summary["world_size"]), 4)
    return summary


def fit(trainer: Any, callback: Any, args: StageArgs, output_dir: str) -> dict[str, Any]:
    """Train (from the newest saved step of an earlier try, when there is one) and return the
    run's summary (steps, losses, tokens/s, wall time, MFU where known)."""
    resume = resume_point(args, output_dir)
    started = time.monotonic()
    trainer.train(resume_from_checkpoint=resume)
    targs = trainer.args
    samples = int(trainer.state.global_step) * targs.per_device_train_batch_size * \
        targs.gradient_accumulation_steps * world_size()
    summary = training_summary(trainer, callback, time.monotonic() - started, args.peak_tflops, samples)
    if resume:
        summary["resumed_from_step"] = int(Path(resume).name.split("-")[-1])
    return summary


def end_distributed() -> None:
    """Leave the process group, if this process joined one, once its work is done. A gloo group
    left to the interpreter's exit can abort a finished rank ("terminate called without an active
    exception": gloo's threads still hold tensors while Python tears down), which fails the launch
    after the checkpoint is saved. No collective call here: a rank still publishing holds no one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def run_stage(train: Any, argv: list[str] | None = None) -> int:
    """A stage script's `main`: `train(argv, pipes)` reporting through Pipes (rank 0), then the
    process group, if any, is left."""
    with reporting() as pipes:
        code = train(argv, pipes)
    end_distributed()
    return code


def effective(config: Any, model_args: Any, script: StageArgs, limit: int) -> dict[str, Any]:
    """The values the run actually trained with (after defaults), for lineage."""
    values = config.to_dict()
    out = {k: values[k] for k in EFFECTIVE_KEYS if k in values}
    out.update({k: getattr(model_args, k) for k in MODEL_KEYS if hasattr(model_args, k)})
    own = {k: v for k, v in asdict(script).items() if k not in asdict(StageArgs())}
    return {**out, **own, "max_tokens": limit}


def _save_weights(trainer: Any, out: Path) -> None:
    """Every rank takes part under ZeRO-3; a LoRA run saves its adapter merged into the weights."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    if hasattr(model, "merge_and_unload"):  # peft
        if rank() == 0:
            merged = model.merge_and_unload()
            merged.save_pretrained(str(out), safe_serialization=True)
        return
    trainer.save_model(str(out))


def save_and_publish(args: StageArgs, trainer: Any, summary: dict[str, Any], pipes: Any,
                     record: dict[str, Any]) -> None:
    """Save the model + tokenizer, then on rank 0 write the lineage (with the effective values and
    the base model's revision) and card, publish to the store and report through Pipes."""
    from resources.checkpoint_store import CheckpointStore, content_sha256
    from shopdistill_assets.training.lineage import model_card

    out = Path(trainer.args.output_dir) / "checkpoint"
    _save_weights(trainer, out)
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
    events = Path(trainer.args.output_dir) / TENSORBOARD_DIR
    if events.is_dir():  # the training curves travel with the checkpoint (outside its content hash)
        shutil.copytree(events, out / TENSORBOARD_DIR, dirs_exist_ok=True)
    lineage = {**args.lineage, "stage": args.stage, **record, "training": summary}
    sha = content_sha256(out)
    if args.publish_to:
        store = CheckpointStore(args.publish_to, endpoint_url=args.s3_endpoint_url)
        card_lineage = {**lineage, "checkpoint": {"stage": args.stage, "version": sha[:16], "sha256": sha}}
        ref = store.publish(args.stage, out, lineage, model_card(card_lineage))
        uri, version = ref.uri, ref.version
        shutil.rmtree(out, ignore_errors=True)  # the store has it
    else:
        uri, version = str(out), sha[:16]
        (out / "lineage.json").write_text(json.dumps(
            {**lineage, "checkpoint": {"stage": args.stage, "version": version, "sha256": sha, "uri": uri}},
            indent=1, sort_keys=True, default=str))
    if pipes is not None:
        pipes.report_asset_materialization(
            metadata={"status": "trained", "version": version, "sha256": sha, "uri": uri,
                      **{k: _pipes_value(v) for k, v in summary.items() if k not in ("losses", "loss_curve")}},
            data_version=sha)


def _pipes_value(value: Any) -> Any:
    """Pipes metadata takes scalars as they are; a dict or list goes as typed JSON."""
    return {"raw_value": value, "type": "json"} if isinstance(value, (dict, list)) else value


def base_revision(model_path: str) -> str | None:
    """The commit of a Hugging Face model as loaded (None for a local folder or a built model)."""
    try:
        from transformers import AutoConfig

        return getattr(AutoConfig.from_pretrained(model_path), "_commit_hash", None)
    except (OSError, ValueError):
        return None


def adopt_training_template(trainer: Any, tokenizer: Any) -> str:
    """When the tokenizer's template is not prefix-preserving (Qwen3's own drops the think block
    of earlier turns) TRL trains with its prefix-preserving one (every turn alike, empty
    `<think></think>` included); the checkpoint then carries that template, so the next stages and
    serving render a dialogue's earlier turns exactly as they were trained. The tool-call parser
    of the original template is kept (TRL recognizes templates by their exact text)."""
    from trl.chat_template_utils import add_response_schema, is_chat_template_prefix_preserving

    template = getattr(trainer, "chat_template", None)
    if not template or is_chat_template_prefix_preserving(tokenizer):
        return "original"
    try:
        add_response_schema(tokenizer)
    except ValueError:  # a template TRL does not know: nothing to keep
        pass
    tokenizer.chat_template = template
    if getattr(trainer, "processing_class", None) is not None and trainer.processing_class is not tokenizer:
        trainer.processing_class.chat_template = template
    return "training"


def setup_tensorboard(output_dir: str) -> None:
    """TensorBoard event files under output_dir/runs (transformers reads TENSORBOARD_LOGGING_DIR)."""
    os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(Path(output_dir) / TENSORBOARD_DIR))
