"""Training throughput per stage: tokens/s of each method's script under the `deepspeed` launcher.

    python benchmarks/training.py [--size tiny|small] [--model PATH_OR_HF_ID] [--steps 8]
                                  [--deepspeed zero2] [--peak-tflops 989] [--out DIR]
    python benchmarks/training.py --memory [--seq 16384]     # per-GPU memory of Qwen3-4B, no run

Builds a small simulated arena, the conversational SFT rows of its gated traces, KTO rows and
GRPO prompts (the same row builders the assets use), then launches `sft.py`, `kto.py` and
`dr_grpo.py` exactly as a stage does (one `deepspeed --num_gpus N` process group, ZeRO config from
deploy/deepspeed), each for `--steps` optimizer steps, and prints what rank 0 reported: steps,
tokens, wall time, tokens/s, and MFU when `--peak-tflops` is given (GPU). On CPU the model is
built offline: `tiny` (hidden 64, 2 layers, ~0.14 M parameters) or `small` (hidden 256, 4 layers).
Tokens are what each trainer counts (SFT/GRPO: `num_tokens`; KTO: input tokens seen).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def build_model(size: str, folder: Path) -> str:
    from shopdistill_assets.training.tiny_model import build_tiny_model

    if size == "tiny":
        return str(build_tiny_model(folder))
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    from shopdistill_assets.training.tiny_model import build_tokenizer

    tokenizer = build_tokenizer(2048)
    torch.manual_seed(0)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, head_dim=32, max_position_embeddings=16384,
                         tie_word_embeddings=True, bos_token_id=None, eos_token_id=eos, pad_token_id=pad)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=[eos, pad], pad_token_id=pad)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def build_datasets(work: Path) -> dict[str, str]:
    import pyarrow.parquet as pq

    from shopdistill_assets.corpus.normalize import iter_records
    from shopdistill_assets.sim import ArenaConfig, simulate
    from shopdistill_assets.training.stages import rows

    arena = work / "arena"
    simulate(ArenaConfig(out=arena, start_day=date(2026, 11, 1), days=1, traces_per_day=300, seed=3,
                         problems_per_day=60))
    import gzip

    traces = []
    for path in sorted((arena / "firehose" / "day=2026-11-01").glob("*.jsonl.gz")):
        try:
            lines = [(path.name, i, line) for i, line in enumerate(gzip.open(path, "rb"), 1)]
        except EOFError:  # the simulator truncates a late file on purpose
            continue
        traces += [row for kind, row in iter_records(lines, "2026-11-01") if kind == "trace"]
    traces = [t for t in traces if t.get("score") is not None][:200]
    good = [t for t in traces if (t.get("score") or 0) >= 1]
    bad = [t for t in traces if (t.get("score") or 0) <= 0]
    out = {}
    for name, table in (
        ("sft", rows.to_table(rows.sft_rows(traces, "bench"), rows.SFT_SCHEMA)),
        ("kto", rows.to_table([*rows.kto_rows(good, True, "d", 2), *rows.kto_rows(bad, False, "u", 2)],
                              rows.KTO_SCHEMA)),
        ("dr_grpo", rows.to_table(rows.grpo_rows(good, "teacher", 4, max_prompt_chars=12_000), rows.GRPO_SCHEMA)),
    ):
        path = work / f"{name}.parquet"
        pq.write_table(table, path)
        out[name] = str(path)
        print(f"dataset {name}: {table.num_rows} rows", flush=True)
    return out


def run_stage(method: str, model: str, dataset: str, work: Path, args: argparse.Namespace) -> dict:
    import yaml

    from resources.launcher import deepspeed_config, local_job_env

    trainer = {"max_steps": args.steps, "logging_steps": 1, "learning_rate": 1e-4}
    if method in ("sft", "kto"):
        trainer["max_length"] = args.max_length
    if method == "kto":
        trainer["per_device_train_batch_size"] = 2
    if method == "dr_grpo":
        trainer.update(num_generations=4, max_completion_length=64, per_device_train_batch_size=4)
    config = {"stage": f"bench-{method}", "model_name_or_path": model, "dataset": dataset,
              "output_dir": str(work / method), **trainer, "deepspeed": deepspeed_config(args.deepspeed)[1],
              "lineage": {"parent": {"base_model": model}, "dataset": {"asset": method}, "days": []},
              "peak_tflops": args.peak_tflops, "report_to": []}
    Path(config["output_dir"]).mkdir(parents=True, exist_ok=True)
    path = work / f"{method}.yaml"
    path.write_text(yaml.safe_dump(config))
    launcher = shutil.which("deepspeed", path=str(Path(sys.executable).parent)) or "deepspeed"
    started = time.monotonic()
    proc = subprocess.run([launcher, "--num_gpus", str(args.gpus), str(REPO / "shopdistill_assets" / "training" / "stages" /
                                                                        f"{method}.py"), "--config", str(path)],
                          capture_output=True, text=True, env={**os.environ, **local_job_env()})
    wall = time.monotonic() - started
    reports = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"materialization"')]
    if proc.returncode != 0 or not reports:
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
        raise SystemExit(f"{method}: failed (exit {proc.returncode})")
    return {**reports[-1]["materialization"], "process_wall_s": round(wall, 1)}


# Qwen3-4B's shape (its config.json); the parameter count is taken from the model built on the
# meta device (no weights, no hub): 4,022,468,096 with tied embeddings.
QWEN3_4B = {"vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": True}
GPUS = {"H200": 141, "H100": 80}  # GB of HBM


def qwen3_4b_params() -> int:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    with torch.device("meta"):
        model = Qwen3ForCausalLM(Qwen3Config(**QWEN3_4B))
    return sum(p.numel() for p in model.parameters())


def memory_gb(n: int, gpus: int, zero: int, seq: int, shape: dict = QWEN3_4B) -> dict[str, float]:
    """Per-GPU memory of full fine-tuning with AdamW in bf16 mixed precision (GB = 1e9 bytes):
    bf16 weights 2N, bf16 grads 2N, fp32 master + Adam m, v 12N; ZeRO-2 splits grads and
    optimizer over the GPUs, ZeRO-3 the weights too. Activations of one sequence of `seq` tokens
    with gradient checkpointing: each layer's input (2·s·h bytes a layer), one layer recomputed
    (~34·s·h bytes, flash attention: no s² scores) and the fp32 logits with their gradient (8·s·V)."""
    h, layers, vocab = shape["hidden_size"], shape["num_hidden_layers"], shape["vocab_size"]
    weights = 2 * n / (gpus if zero == 3 else 1)
    grads_optim = (2 * n + 12 * n) / (gpus if zero >= 2 else 1)
    activations = 2 * seq * h * layers + 34 * seq * h + 8 * seq * vocab
    total = weights + grads_optim + activations
    return {"weights": weights / 1e9, "grads+optimizer": grads_optim / 1e9, "activations": activations / 1e9,
            "total": total / 1e9}


def memory_table(seq: int) -> int:
    n = qwen3_4b_params()
    print(f"Qwen3-4B: N = {n:,} parameters (meta device); one sequence of {seq:,} tokens per GPU, "
          "gradient checkpointing, AdamW, bf16")
    print(f"{'setup':<22} {'weights':>8} {'grad+opt':>9} {'activ.':>7} {'total GB':>9} {'HBM':>5}  fits")
    for label, gpus, kind, zero in (("1xH200 ZeRO-2", 1, "H200", 2), ("8xH100 ZeRO-2", 8, "H100", 2),
                                    ("8xH100 ZeRO-3", 8, "H100", 3)):
        m = memory_gb(n, gpus, zero, seq)
        print(f"{label:<22} {m['weights']:>8.1f} {m['grads+optimizer']:>9.1f} {m['activations']:>7.1f} "
              f"{m['total']:>9.1f} {GPUS[kind]:>5}  {'yes' if m['total'] < 0.9 * GPUS[kind] else 'no'}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", action="store_true", help="print the Qwen3-4B per-GPU memory table and exit")
    parser.add_argument("--seq", type=int, default=16384, help="--memory: tokens per sequence")
    parser.add_argument("--size", choices=["tiny", "small"], default="tiny")
    parser.add_argument("--model", help="a Hugging Face id or local checkpoint instead of a built one")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=4096)
    parser.add_argument("--deepspeed", default="zero2")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--peak-tflops", type=float, help="per-GPU peak for MFU (H200 bf16 dense: 989)")
    parser.add_argument("--out", help="work folder to keep (default: a temp folder)")
    args = parser.parse_args()
    if args.memory:
        return memory_table(args.seq)
    work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-train-"))
    work.mkdir(parents=True, exist_ok=True)
    model = args.model or build_model(args.size, work / f"model-{args.size}")
    datasets = build_datasets(work)
    print(f"model {model}, {args.steps} steps per stage, {args.deepspeed}, {args.gpus} process(es)")
    print(f"{'stage':<8} {'steps':>5} {'tokens':>9} {'train s':>8} {'tokens/s':>9} {'params':>10} {'mfu':>6} "
          f"{'process s':>9}")
    for method in ("sft", "kto", "dr_grpo"):
        r = run_stage(method, model, datasets[method], work, args)
        print(f"{method:<8} {r['steps']:>5} {r['tokens']:>9} {r['wall_s']:>8} {r['tokens_per_s']:>9} "
              f"{r['model_params']:>10} {r.get('mfu', '-'):>6} {r['process_wall_s']:>9}", flush=True)
    if not args.out:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
