"""The rollout job (training/stages/rollouts.py) beside the model: run from s3:// URIs alone as a
pod runs it (the hf backend on the tiny offline model, against moto's S3), its server lifecycle
on a real server process, and the GPU pod + `vllm serve` command a rollout job is launched with
(built and checked without a cluster). The job launched by `train_rollouts` through the local
launcher is in test_training.py (the chain)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from resources.checkpoint_store import CheckpointStore

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "shopdistill_assets" / "training" / "stages" / "rollouts.py"
# What resft_dataset and kto_dataset read of a rollout row (besides the canonical trace columns).
READ_BY_DATASETS = {"trace_id", "problem_id", "query", "category", "messages", "tools", "success", "sample",
                    "n_steps", "failure_reason", "leak_cluster_id", "problem_json"}


def _world(root: Path, problems: int) -> tuple[Path, Path]:
    """A toy catalogue folder and a train_problems-shaped Parquet part."""
    from shopdistill_assets.sandbox import write_catalog
    from shopdistill_assets.sim.toy_world import toy_world
    from shopdistill_assets.split.heldout import heldout_row

    catalog, suite = toy_world(seed=3, n_problems=problems)
    write_catalog(catalog, root / "catalog" / "documents.jsonl.gz")
    rows = [heldout_row(p, p.problem_id, f"lc-{i}") for i, p in enumerate(suite)]
    part = root / "problems" / "part-0.parquet"
    part.parent.mkdir(parents=True)
    pl.DataFrame(rows).write_parquet(part)
    return root / "catalog", part


def test_the_rollout_job_runs_from_s3_uris_alone(moto_s3, tmp_path):
    """What a pod gets is URIs: the job config (by reference), the checkpoint, the problems and the
    catalogue are s3:// objects the job fetches itself; it serves the checkpoint (hf backend: the
    CPU path), rolls k episodes per problem out in the sandbox and writes the rows to S3."""
    import boto3

    from shopdistill_assets.training.stages import rows as train_rows
    from shopdistill_assets.training.tiny_model import build_tiny_model

    s3 = boto3.client("s3", endpoint_url=moto_s3)
    for bucket in ("lake", "models"):
        s3.create_bucket(Bucket=bucket)
    store = CheckpointStore("s3://models/ckpt", endpoint_url=moto_s3, cache_dir=str(tmp_path / "cache"))
    sft = store.publish("sft", build_tiny_model(tmp_path / "base"), {"stage": "sft"}, "# card")
    catalog, part = _world(tmp_path / "world", 3)
    s3.upload_file(str(part), "lake", "snapshots/train_problems/v1/g1/part-0.parquet")
    output = store.run_uri("train_rollouts", "run1", "run1.parquet")
    config = {"model": sft.uri, "problems": "s3://lake/snapshots/train_problems/v1/g1",
              "catalog": store.ensure_tree(catalog, "catalog"), "output": output, "model_name": f"sft-{sft.version}",
              "backend": "hf", "samples": 2, "max_steps": 3, "max_new_tokens": 24, "s3_endpoint_url": moto_s3,
              "output_dir": str(tmp_path / "pod")}
    config_uri = store.put_text(store.run_uri("train_rollouts", "run1", "run1.yaml"), yaml.safe_dump(config))
    done = subprocess.run([sys.executable, str(SCRIPT), "--config", config_uri, "--concurrency", "4"], cwd=tmp_path,
                          env={**os.environ, "SHOPDISTILL_S3_ENDPOINT_URL": moto_s3}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = next(json.loads(line)["materialization"] for line in done.stdout.splitlines()
                  if line.startswith('{"materialization"'))
    assert report["status"] == "rolled_out" and report["uri"] == output and report["backend"] == "hf"
    assert (report["rows"], report["problems"], report["samples"]) == (6, 3, 2)
    assert report["successes"] == round(report["success_rate"] * 6)
    rows = pl.read_parquet(_download(s3, output, tmp_path / "rows.parquet"))
    assert READ_BY_DATASETS <= set(rows.columns) and rows.height == 6
    assert sorted(rows["sample"].to_list()) == [0, 0, 0, 1, 1, 1] and rows["problem_id"].n_unique() == 3
    assert set(rows["leak_cluster_id"]) == {"lc-0", "lc-1", "lc-2"}
    assert set(rows["agent_version_id"]) == {f"sft-{sft.version}"}  # the checkpoint it served
    # the rows are what the re-SFT dataset is made of (resft_dataset keeps the successful ones)
    sft_rows = list(train_rows.sft_rows(rows.to_dicts(), "train_rollouts"))
    assert len(sft_rows) == 6 and all(r["messages"][0]["role"] == "system" for r in sft_rows)


def _download(s3, uri: str, dest: Path) -> Path:
    bucket, _, key = uri[5:].partition("/")
    s3.download_file(bucket, key, str(dest))
    return dest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_server_process_is_waited_for_and_stopped(tmp_path):
    """The vllm backend's lifecycle, on a real OpenAI-compatible server process (`shopdistill
    serve`): used once GET /v1/models answers, its process group stopped after; a server that
    dies first fails the job with the end of its log."""
    from shopdistill_assets.agent.server import wait_ready
    from shopdistill_assets.training.stages.rollouts import ServerFailed, served_process

    port = _free_port()
    command = [sys.executable, "-m", "shopdistill_assets.cli", "serve", "--policy", "random", "--port", str(port),
               "--model-name", "sft-x"]
    with served_process(command, f"http://127.0.0.1:{port}/v1", 120, tmp_path / "server.log") as url:
        from openai import OpenAI

        models = OpenAI(base_url=url, api_key="local").models.list()
        assert [m.id for m in models.data] == ["sft-x"]
    assert not wait_ready(url, timeout_s=1.0)  # stopped
    dying = [sys.executable, "-c", "import sys; print('CUDA out of memory'); sys.exit(3)"]
    with pytest.raises(ServerFailed, match="exited with 3(.|\n)*CUDA out of memory"):
        with served_process(dying, f"http://127.0.0.1:{_free_port()}/v1", 60, tmp_path / "dying.log"):
            pass


HELM_POD_SPEC = json.dumps({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                            "resources": {"limits": {"nvidia.com/gpu": "8"}}})


def test_a_rollout_job_with_vllm_gets_the_whole_gpu_node_and_only_s3_uris(moto_s3, tmp_path):
    """In production (SHOPDISTILL_GPU_POD_SPEC set) train_rollouts picks the vllm backend and
    launches the job in a pod of the training image on one GPU node: the pod Dagster Pipes would
    create (dagster-k8s's own builder), the job's config (only s3:// URIs: nothing local is sent),
    and the `vllm serve` command it starts there, tensor-parallel over the node's 8 GPUs."""
    import boto3
    from dagster_k8s.pipes import build_pod_body

    from resources.checkpoint_store import CheckpointRef
    from shopdistill_assets.training import rollout_job
    from shopdistill_assets.training.data_assets import TrainRolloutsConfig
    from shopdistill_assets.training.launch import launcher_from_env
    from shopdistill_assets.training.stages.rollouts import parse_job, vllm_command

    boto3.client("s3", endpoint_url=moto_s3).create_bucket(Bucket="models")
    store = CheckpointStore("s3://models/ckpt", endpoint_url=moto_s3)
    launcher = launcher_from_env({"SHOPDISTILL_GPU_POD_SPEC": HELM_POD_SPEC, "SHOPDISTILL_TRAIN_IMAGE": "train:abc"})
    ref = CheckpointRef("sft", "0123456789abcdef", "0" * 64, "s3://models/ckpt/sft/0123456789abcdef")
    catalog, _ = _world(tmp_path, 1)
    values = rollout_job.job_values(TrainRolloutsConfig(), ref=ref, name="sft-0123456789abcdef", store=store,
                                    catalog_uri=rollout_job.catalog_uri(catalog, store, launcher), launcher=launcher,
                                    run_key="r1", run_id="r2",
                                    problems_uri="s3://lake/snapshots/train_problems/v-1/g-1")
    assert values["backend"] == "vllm" and values["tensor_parallel_size"] == 8 and values["samples"] == 8
    assert (values["concurrency"], values["max_new_tokens"]) == (128, 2048)  # vLLM batches; Qwen3 thinks
    uris = {k: values[k] for k in ("model", "problems", "catalog", "output")}
    assert all(v.startswith("s3://") for v in uris.values()), uris
    assert values["output"] == "s3://models/ckpt/.runs/train_rollouts/r1/r2.parquet"
    assert values["catalog"].startswith("s3://models/ckpt/.runs/catalog/")  # uploaded once, content-addressed
    assert values["output_dir"].startswith("/cache/runs/train_rollouts/")  # the pod's cache volume
    assert not any(str(tmp_path) in str(v) for v in values.values())  # no local path reaches the pod

    config_uri = "s3://models/ckpt/.runs/train_rollouts/r1/r2.yaml"
    spec, command = launcher.pod(rollout_job.SCRIPT, config_uri, runner="python")
    assert command == ["python", "/app/shopdistill_assets/training/stages/rollouts.py", "--config", config_uri]
    pod = build_pod_body("rollouts-1", launcher.image, command, {"DAGSTER_PIPES_CONTEXT": "x"}, None, spec)
    container = pod.spec.containers[0]
    assert container.image == "train:abc" and container.command == command and pod.spec.restart_policy == "Never"
    assert container.resources.limits["nvidia.com/gpu"] == container.resources.requests["nvidia.com/gpu"] == "8"
    assert pod.spec.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod.spec.tolerations[0].key == "nvidia.com/gpu"
    assert {m.mount_path for m in container.volume_mounts} == {"/dev/shm", "/cache"}  # vLLM's workers share /dev/shm
    assert all(len(e.value or "") < 200 for e in container.env)  # the config travels by reference

    # the job reads that config as the pod would, and starts vLLM on the fetched checkpoint
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(values))
    args = parse_job(["--config", str(tmp_path / "job.yaml")])
    served = vllm_command(args, "/cache/runs/train_rollouts/r2/model", 8000, args.tensor_parallel_size)
    assert served[1:4] == ["serve", "/cache/runs/train_rollouts/r2/model", "--served-model-name"]
    flags = " ".join(served[2:])
    for flag in ("--tensor-parallel-size 8", "--enable-auto-tool-choice", "--tool-call-parser hermes",
                 "--reasoning-parser qwen3", "--served-model-name sft-0123456789abcdef", "--host 127.0.0.1"):
        assert flag in flags, flag

    # locally (no pod spec) the CPU path; a pod is refused local paths
    local = launcher_from_env({}, work_dir=str(tmp_path / "runs"))
    assert rollout_job.backend_for(None, local) == "hf" and rollout_job.BACKEND_DEFAULTS["hf"]["concurrency"] == 8
    with pytest.raises(rollout_job.RolloutJobError, match="must be s3://"):
        local_store = CheckpointStore(str(tmp_path / "store"))
        rollout_job.job_values(TrainRolloutsConfig(), ref=ref, name="sft", launcher=launcher, store=local_store,
                               catalog_uri=rollout_job.catalog_uri(catalog, local_store, launcher), run_key="r1",
                               run_id="r2", problems_uri=str(tmp_path / "problems"))
    with pytest.raises(rollout_job.RolloutJobError, match="backend"):
        rollout_job.backend_for("sglang", launcher)
