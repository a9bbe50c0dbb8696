"""The orchestrator's side of the rollout job (`training/stages/rollouts.py`): its config, written
to the checkpoint store and passed by reference, launched through the training launcher like a
stage (locally, or in a GPU pod of the training image beside the model), its rows read back.

    ROOT/.runs/train_rollouts/<root run>/<run>.yaml      the job's config (RolloutJobArgs keys)
    ROOT/.runs/train_rollouts/<root run>/<run>.parquet   the rows it wrote
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from resources.checkpoint_store import CheckpointRef, CheckpointStore
from resources.launcher import TrainingLauncher
from shopdistill_assets.training.stages.rollouts import BACKENDS

ASSET = "train_rollouts"
SCRIPT = "rollouts.py"
# What the asset config passes on to the job as it is (RolloutJobArgs fields of the same name).
PASSED = ("samples", "max_steps", "temperature", "max_new_tokens", "batch_size", "concurrency", "request_timeout_s",
          "episode_time_limit_s", "limit", "tensor_parallel_size", "vllm_args")
# Per backend, what a config left unset: a CPU decodes a few short turns at a time; vLLM batches
# hundreds of sequences, and a Qwen3 turn (think + tool call) needs more than 512 tokens.
BACKEND_DEFAULTS = {"hf": {"concurrency": 8, "max_new_tokens": 512},
                    "vllm": {"concurrency": 128, "max_new_tokens": 2048}}


class RolloutJobError(ValueError):
    """The job cannot be launched as configured (a bad backend, local paths for a pod)."""


def backend_for(given: str | None, launcher: TrainingLauncher) -> str:
    """vLLM where stages run in GPU pods, HF generate locally, unless the config says."""
    backend = given or ("vllm" if launcher.remote else "hf")
    if backend not in BACKENDS:
        raise RolloutJobError(f"backend must be one of {BACKENDS}, got {backend!r}")
    return backend


def catalog_uri(catalog: Path, store: CheckpointStore, launcher: TrainingLauncher) -> str:
    """The sandbox catalogue where the job can read it: this folder locally, else uploaded to the
    store (content-addressed, once)."""
    return store.ensure_tree(catalog, "catalog") if launcher.remote and store.is_s3 else str(catalog)


def job_values(config: Any, *, ref: CheckpointRef, name: str, problems_uri: str, catalog_uri: str,
               store: CheckpointStore, launcher: TrainingLauncher, run_key: str, run_id: str) -> dict[str, Any]:
    """The job's config: the checkpoint, problems, catalogue and output as URIs a pod can read;
    the vllm backend shards the model over the whole node's GPUs unless the config says."""
    backend = backend_for(config.backend, launcher)
    output = store.run_uri(ASSET, run_key, f"{run_id}.parquet")
    uris = {"model": ref.uri, "problems": problems_uri, "catalog": catalog_uri, "output": output}
    local = {k: v for k, v in uris.items() if not v.startswith("s3://")}
    if launcher.remote and local:
        raise RolloutJobError(f"a GPU pod shares no folder with this process; the lake and the checkpoint store "
                              f"must be s3:// (got {local})")
    values = {**uris, "model_name": name, "backend": backend, "output_dir": launcher.output_dir(ASSET, run_id),
              "s3_endpoint_url": store.endpoint_url, **{k: getattr(config, k) for k in PASSED}}
    for key, default in BACKEND_DEFAULTS[backend].items():
        if values[key] is None:
            values[key] = default
    if backend == "vllm" and not values["tensor_parallel_size"]:
        values["tensor_parallel_size"] = launcher.gpus  # the whole node's GPUs
    return {k: v for k, v in values.items() if v is not None and v != []}


def launch(context: Any, store: CheckpointStore, launcher: TrainingLauncher, values: dict[str, Any],
           run_key: str, run_id: str) -> dict[str, Any]:
    """Write the config to the store and run the job on it; returns what it reported."""
    import yaml

    uri = store.put_text(store.run_uri(ASSET, run_key, f"{run_id}.yaml"), yaml.safe_dump(values, sort_keys=True))
    env = {"SHOPDISTILL_S3_ENDPOINT_URL": store.endpoint_url} if store.endpoint_url else {}
    return launcher.launch(context, SCRIPT, uri, values["output_dir"], env, runner="python")["metadata"]


def read_rows(uri: str, store: CheckpointStore, scratch: Path) -> pa.Table:
    """The rows the job wrote (downloaded first from S3)."""
    import pyarrow.parquet as pq

    from resources.checkpoint_store import fetch

    return pq.read_table(fetch(uri, scratch / "rollouts.parquet", store.endpoint_url))
