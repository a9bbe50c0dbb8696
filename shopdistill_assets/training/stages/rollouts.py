"""The rollout job: k sandbox rollouts per train problem from a checkpoint served beside it.

    python shopdistill_assets/training/stages/rollouts.py --config rollouts.yaml [--backend hf] [--samples 2]

On the node where it runs, the job fetches the checkpoint (a folder or an s3:// URI), serves it
behind an OpenAI-compatible endpoint, plays `samples` episodes of every problem in the sandbox
(`agent.rollout.evaluate`: the same harness, deadlines and scorer as evaluation), writes the rows
(canonical trace columns + outcome: what `train_rollouts` snapshots and `resft_dataset` reads) as
one Parquet file at `output` (a path or s3://), and reports counts and the success rate through
Dagster Pipes (JSON lines on stdout when run by hand). Two ways to serve:

    vllm  `vllm serve <checkpoint> --enable-auto-tool-choice --tool-call-parser hermes
          --reasoning-parser qwen3 --tensor-parallel-size <the node's GPUs>` as a subprocess, used
          once GET /v1/models answers, stopped (its whole process group) when the rollouts end
    hf    the project's own server (`agent/server.py`) over transformers generate: the CPU path

`--config` is a YAML mapping of `RolloutJobArgs` (a path or an s3:// object, the way stage
configs travel); any field may also be given on the command line. `train_rollouts` launches this
script through the training launcher (locally, or in a GPU pod of the training image).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from shopdistill_assets.training.stages.common import (_config_arg, _pipes_value, dataset_files, end_distributed,
                                                         reporting)

BACKENDS = ("hf", "vllm")


@dataclass
class RolloutJobArgs:
    """What the orchestrator tells a rollout job (every field a YAML key or a `--flag`)."""

    model: str = field(default="", metadata={"help": "the checkpoint: a folder or s3:// URI"})
    problems: str = field(default="", metadata={"help": "train_problems rows: a folder of Parquet parts or a file "
                                                        "(local or s3://)"})
    catalog: str = field(default="", metadata={"help": "the sandbox catalogue folder (local or s3://)"})
    output: str = field(default="", metadata={"help": "where the rollout rows go: a Parquet path or s3:// URI"})
    model_name: str = field(default="policy", metadata={"help": "the name the policy is served and recorded under"})
    backend: str = field(default="hf", metadata={"help": "vllm (GPU) | hf (transformers generate, CPU)"})
    samples: int = field(default=8, metadata={"help": "rollouts per problem (k)"})
    max_steps: int = field(default=25, metadata={"help": "steps per episode"})
    temperature: float = field(default=0.7, metadata={"help": "sampling temperature"})
    max_new_tokens: int = field(default=512, metadata={"help": "per model turn"})
    batch_size: int = field(default=1, metadata={"help": "hf: concurrent turns decoded together"})
    concurrency: int = field(default=8, metadata={"help": "episodes in flight"})
    request_timeout_s: float = field(default=300.0, metadata={"help": "per model call"})
    episode_time_limit_s: float = field(default=300.0, metadata={"help": "per episode, calls and tools alike"})
    limit: int | None = field(default=None, metadata={"help": "roll out only the first N problems"})
    seed: int = field(default=0, metadata={"help": "episode seeds derive from it"})
    tensor_parallel_size: int | None = field(default=None, metadata={"help": "vllm: default all GPUs of the node"})
    gpu_memory_utilization: float = field(default=0.9, metadata={"help": "vllm: share of each GPU it may take"})
    max_model_len: int | None = field(default=None, metadata={"help": "vllm: context length (default the model's)"})
    reasoning_parser: str = field(default="qwen3", metadata={
        "help": "vllm: the <think> block as reasoning_content, as the hf path returns it ('' for none)"})
    vllm_args: list[str] = field(default_factory=list, metadata={"help": "vllm: more `vllm serve` flags"})
    server_timeout_s: float = field(default=1800.0, metadata={"help": "vllm: time to load and answer /v1/models"})
    output_dir: str = field(default="", metadata={"help": "scratch folder (default: a temporary one)"})
    s3_endpoint_url: str | None = field(default=None, metadata={"help": "S3-compatible endpoint"})


def parse_job(argv: list[str]) -> RolloutJobArgs:
    """The job's args: `--config` (fetched when s3://) beneath the command line's flags."""
    import yaml
    from transformers import HfArgumentParser

    from resources.checkpoint_store import fetch

    argv = list(argv)
    parser = HfArgumentParser(RolloutJobArgs)
    found = _config_arg(argv)
    if found:
        scratch = Path(tempfile.mkdtemp(prefix="rollout-config-"))
        endpoint = os.environ.get("SHOPDISTILL_S3_ENDPOINT_URL") or None
        given = yaml.safe_load(fetch(found[1], scratch / "job.yaml", endpoint).read_text()) or {}
        if not isinstance(given, dict):
            raise SystemExit(f"{found[1]}: a rollout job config is a YAML mapping")
        unknown = sorted(set(given) - {f.name for f in fields(RolloutJobArgs)})
        if unknown:
            raise SystemExit(f"{found[1]}: unknown keys {unknown}")
        parser.set_defaults(**given)
        skip = {found[0]} if argv[found[0]].startswith("--config=") else {found[0] - 1, found[0]}
        argv = [a for i, a in enumerate(argv) if i not in skip]
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    missing = [name for name in ("model", "problems", "catalog", "output") if not getattr(args, name)]
    if missing:
        raise SystemExit(f"rollouts: {', '.join(missing)} required")
    if args.backend not in BACKENDS:
        raise SystemExit(f"rollouts: backend must be one of {BACKENDS}, got {args.backend!r}")
    return args


# -- serving ------------------------------------------------------------------------------

def node_gpus() -> int:
    """The GPUs this process sees (at least 1: a vLLM server needs one)."""
    try:
        import torch

        return max(1, torch.cuda.device_count())
    except ImportError:
        return 1


def vllm_command(args: RolloutJobArgs, model_path: str, port: int, tensor_parallel: int) -> list[str]:
    """`vllm serve` for the checkpoint: tool calls parsed from Qwen3's <tool_call> blocks (hermes),
    the think block returned as reasoning, the model sharded over `tensor_parallel` GPUs."""
    program = shutil.which("vllm", path=str(Path(sys.executable).parent)) or "vllm"
    command = [program, "serve", str(model_path), "--served-model-name", args.model_name, "--host", "127.0.0.1",
               "--port", str(port), "--tensor-parallel-size", str(tensor_parallel), "--enable-auto-tool-choice",
               "--tool-call-parser", "hermes", "--gpu-memory-utilization", str(args.gpu_memory_utilization),
               "--seed", str(args.seed)]
    if args.reasoning_parser:
        command += ["--reasoning-parser", args.reasoning_parser]
    if args.max_model_len:
        command += ["--max-model-len", str(args.max_model_len)]
    return command + list(args.vllm_args)


class ServerFailed(RuntimeError):
    """The policy server never answered (it exited, or it did not start in time)."""


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextmanager
def served_process(command: list[str], base_url: str, timeout_s: float, log: Path) -> Iterator[str]:
    """Run a server command in its own process group until GET {base_url}/models answers; yield
    the URL; stop the whole group (a tensor-parallel vLLM has a worker per GPU) on the way out."""
    from shopdistill_assets.agent.server import wait_ready

    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while not wait_ready(base_url, timeout_s=1.0):
            if process.poll() is not None:
                raise ServerFailed(f"{Path(command[0]).name} exited with {process.returncode} before serving; "
                                   f"{log} ends with:\n{_log_tail(log)}")
            if time.monotonic() > deadline:
                raise ServerFailed(f"{Path(command[0]).name} did not answer {base_url}/models within {timeout_s:g} s; "
                                   f"{log} ends with:\n{_log_tail(log)}")
        yield base_url
    finally:
        _stop(process)


def _stop(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    if process.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def policy_endpoint(args: RolloutJobArgs, model_path: str, scratch: Path) -> Iterator[str]:
    """The checkpoint behind an OpenAI-compatible base URL, for as long as the block runs."""
    if args.backend == "hf":
        from shopdistill_assets.agent.hf_policy import checkpoint_policy
        from shopdistill_assets.agent.server import serve

        policy = checkpoint_policy(model_path, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
        with serve(policy, model_name=args.model_name) as server:
            yield server.url
        return
    port = _free_port()
    command = vllm_command(args, model_path, port, args.tensor_parallel_size or node_gpus())
    with served_process(command, f"http://127.0.0.1:{port}/v1", args.server_timeout_s, scratch / "vllm.log") as url:
        yield url


# -- rows ---------------------------------------------------------------------------------

def rollout_rows(result: Any, problems: list[Any], problem_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per episode: the canonical trace row plus its outcome, sample, leak cluster and
    problem (what train_rollouts snapshots, and resft_dataset and kto_dataset read)."""
    by_id = {p.problem_id: p for p in problems}
    truth = {r["problem_id"]: r for r in problem_rows}
    rows = []
    for i, episode in enumerate(result.episodes):
        row = episode.to_canonical_row(result.eval_run_id, i + 1)
        row.update(success=episode.success, failure_reason=episode.failure_reason, sample=episode.sample,
                   leak_cluster_id=truth[episode.problem_id]["leak_cluster_id"],
                   problem_json=json.dumps(by_id[episode.problem_id].to_dict()))
        rows.append(row)
    return rows


def _put(path: Path, uri: str, endpoint_url: str | None) -> str:
    if uri.startswith("s3://"):
        from resources.s3 import make_s3_client, parse_s3_uri

        bucket, key = parse_s3_uri(uri)
        make_s3_client(endpoint_url=endpoint_url).upload_file(str(path), bucket, key)
        return uri
    Path(uri).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, uri)
    return uri


# -- the job ------------------------------------------------------------------------------

def run_job(args: RolloutJobArgs, pipes: Any) -> int:
    import polars as pl
    import pyarrow.parquet as pq

    from resources.checkpoint_store import fetch
    from shopdistill_assets.agent.rollout import RolloutConfig, evaluate
    from shopdistill_assets.sandbox import load_catalog
    from shopdistill_assets.split.heldout import rows_to_problems

    started = time.monotonic()
    scratch = Path(args.output_dir or tempfile.mkdtemp(prefix="rollouts-"))
    scratch.mkdir(parents=True, exist_ok=True)
    model_path = str(fetch(args.model.rstrip("/"), scratch / "model", args.s3_endpoint_url))
    catalog = load_catalog(fetch(args.catalog.rstrip("/"), scratch / "catalog", args.s3_endpoint_url))
    files = dataset_files(args.problems, args.s3_endpoint_url, scratch / "problems")
    problem_rows = pl.read_parquet(files).to_dicts() if files else []
    problems = rows_to_problems(problem_rows)[: args.limit]
    if not problems:
        raise SystemExit(f"rollouts: no problems in {args.problems}")
    cfg = RolloutConfig(samples=args.samples, max_steps=args.max_steps, temperature=args.temperature,
                        max_tokens=args.max_new_tokens, concurrency=args.concurrency, seed=args.seed,
                        request_timeout_s=args.request_timeout_s, episode_time_limit_s=args.episode_time_limit_s)
    done = [0]
    total = len(problems) * args.samples

    def progress(episode: Any) -> None:
        done[0] += 1
        if pipes is not None and (done[0] % max(1, total // 10) == 0 or done[0] == total):
            pipes.log.info(f"rollouts: {done[0]}/{total} episodes")

    with policy_endpoint(args, model_path, scratch) as url:
        served = time.monotonic()
        result = evaluate(url, args.model_name, problems, catalog, cfg, on_episode=progress)
    rows = rollout_rows(result, problems, problem_rows)
    path = scratch / "rollouts.parquet"
    pq.write_table(pl.DataFrame(rows, infer_schema_length=None).to_arrow(), path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    uri = _put(path, args.output, args.s3_endpoint_url)
    summary = result.summary()
    successes = sum(1 for r in rows if r["success"])
    report = {"status": "rolled_out", "uri": uri, "sha256": digest, "rows": len(rows), "problems": len(problems),
              "samples": args.samples, "successes": successes, "success_rate": summary["asr"],
              "pass_at_1": summary["pass_at_1"], "backend": args.backend, "model_name": args.model_name,
              "eval_run_id": result.eval_run_id, "wall_s": round(time.monotonic() - started, 2),
              "rollout_s": round(result.wall_s, 2), "serve_start_s": round(served - started, 2),
              "episodes_per_s": round(len(rows) / result.wall_s, 3) if result.wall_s > 0 else 0.0,
              "pass_at_k": _pipes_value(summary.get("pass_at_k") or {}), "errors": _pipes_value(summary["errors"])}
    if args.backend == "vllm":
        report["tensor_parallel_size"] = args.tensor_parallel_size or node_gpus()
    print(f"rollouts: {len(problems)} problems x {args.samples}: {successes} of {len(rows)} succeeded "
          f"({summary['asr']:.3f}) -> {uri}", file=sys.stderr)
    if pipes is not None:
        pipes.report_asset_materialization(metadata={k: v for k, v in report.items() if v is not None},
                                           data_version=digest)
    return 0


def main(argv: list[str] | None = None) -> int:
    with reporting() as pipes:
        code = run_job(parse_job(sys.argv[1:] if argv is None else argv), pipes)
    end_distributed()
    return code


if __name__ == "__main__":
    sys.exit(main())
