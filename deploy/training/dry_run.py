"""Dry run of the production path: the pod and command a stage (or the rollout job) would be launched with.

    python deploy/training/dry_run.py [--stage sft] [--gpus 8] [--gpu-product NVIDIA-H100-80GB-HBM3]
                                      [--image ghcr.io/shopdistill/shopdistill-train:TAG] [--model Qwen/Qwen3-4B]
    python deploy/training/dry_run.py --rollouts [--gpus 8] [--samples 8]   # train_rollouts' job (vLLM)

Builds the launcher exactly as the Helm deployment does (SHOPDISTILL_GPU_POD_SPEC set), then the
pod with dagster-k8s's own `build_pod_body` (what `PipesK8sClient` submits) and prints it as
Kubernetes YAML, with the config the pod reads by reference (and, for the rollout job, the
`vllm serve` command it starts beside the sandbox). Needs no cluster and no S3.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


RUN = "00000000-dry-run"
PIPES_ENV = {"DAGSTER_PIPES_CONTEXT": "<set by Dagster Pipes>", "DAGSTER_PIPES_MESSAGES": "<set by Pipes>",
             "SHOPDISTILL_S3_ENDPOINT_URL": ""}


def pod_yaml(name: str, image: str, command: list[str], spec: dict) -> tuple[object, dict]:
    """The pod PipesK8sClient would submit (dagster-k8s's builder), and its serialized body."""
    from dagster_k8s.pipes import build_pod_body
    from kubernetes.client import ApiClient

    pod = build_pod_body(name, image, command, PIPES_ENV, {"labels": {"app.kubernetes.io/name": "shopdistill-train"}},
                         spec)
    return pod, ApiClient().sanitize_for_serialization(pod)


def show(title: str, command: list[str], body: dict, config_title: str, config: dict) -> None:
    """The pod (as `kubectl apply` would take it), its command and the config it reads."""
    import yaml

    print(f"# {title}")
    print("# command: " + " ".join(command))
    print(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", **body}, sort_keys=False))
    print(f"# {config_title}:")
    print(yaml.safe_dump(config, sort_keys=False))


def rollouts(args: argparse.Namespace, launcher) -> int:
    """train_rollouts' job on the node: the pod, its config, and the `vllm serve` it starts."""
    from resources.checkpoint_store import CheckpointRef, CheckpointStore
    from shopdistill_assets.training import rollout_job
    from shopdistill_assets.training.data_assets import TrainRolloutsConfig
    from shopdistill_assets.training.stages.rollouts import RolloutJobArgs, vllm_command

    store = CheckpointStore(args.store)
    ref = CheckpointRef("sft", "<newest version>", "<sha256>", f"{args.store}/sft/<newest version>")
    values = rollout_job.job_values(
        TrainRolloutsConfig(samples=args.samples), ref=ref, name="sft-<newest version>", store=store, launcher=launcher,
        catalog_uri=f"{args.store}/.runs/catalog/<content digest>/files", run_key=RUN, run_id=RUN,
        problems_uri="s3://shopdistill-lake/snapshots/train_problems/<version>/<generation>")
    config_uri = store.run_uri(rollout_job.ASSET, RUN, f"{RUN}.yaml")
    spec, command = launcher.pod(rollout_job.SCRIPT, config_uri, runner="python")
    pod, body = pod_yaml(f"dagster-train-rollouts-{RUN[:8]}", launcher.image, command, spec)
    job = RolloutJobArgs(**values)
    served = vllm_command(job, f"{values['output_dir']}/model", 8000, job.tensor_parallel_size)
    show(f"train_rollouts: {args.samples} rollouts per train problem from the newest sft checkpoint, served by "
         f"vLLM on one {args.gpus}-GPU node: {launcher.namespace}/{pod.metadata.name}", command, body,
         f"{config_uri} (the job config, read by rollouts.py in the pod)", values)
    print("# the server the job starts in the pod (once the checkpoint is fetched), used once GET /v1/models answers:")
    print("# " + " ".join(served))
    return 0


def main() -> int:
    from resources.launcher import deepspeed_config
    from shopdistill_assets.training.launch import launcher_from_env
    from shopdistill_assets.training.stages import STAGES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", default="sft", choices=list(STAGES))
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--gpu-product", default="NVIDIA-H100-80GB-HBM3")
    parser.add_argument("--image", default="ghcr.io/shopdistill/shopdistill-train:dry-run")
    parser.add_argument("--model", default="Qwen/Qwen3-4B")
    parser.add_argument("--store", default="s3://shopdistill-models/checkpoints")
    parser.add_argument("--deepspeed", default="zero2")
    parser.add_argument("--rollouts", action="store_true", help="train_rollouts' job (vLLM beside the sandbox)")
    parser.add_argument("--samples", type=int, default=8, help="--rollouts: rollouts per train problem (k)")
    args = parser.parse_args()

    pod_spec = {"nodeSelector": {"nvidia.com/gpu.product": args.gpu_product},
                "resources": {"limits": {"nvidia.com/gpu": str(args.gpus)}}}
    launcher = launcher_from_env({"SHOPDISTILL_GPU_POD_SPEC": json.dumps(pod_spec), "SHOPDISTILL_TRAIN_IMAGE": args.image,
                                  "SHOPDISTILL_DEEPSPEED": args.deepspeed, "DAGSTER_K8S_NAMESPACE": "shopdistill",
                                  "SHOPDISTILL_PEAK_TFLOPS": "989"})
    if args.rollouts:
        return rollouts(args, launcher)
    stage = STAGES[args.stage]
    run = RUN
    config_uri = f"{args.store}/.runs/{stage.name}/{run}/{run}.yaml"
    spec, command = launcher.pod(stage.script, config_uri)
    pod, body = pod_yaml(f"dagster-{stage.name}-{run[:8]}", launcher.image, command, spec)
    stage_config = {
        "stage": stage.name, "model_name_or_path": args.model if stage.parent is None else
        f"{args.store}/{stage.parent}/<newest version>", "dataset": f"s3://shopdistill-lake/snapshots/{stage.dataset}/"
        "<version>/<generation>", "output_dir": launcher.output_dir(stage.name, run),
        "deepspeed": deepspeed_config(launcher.deepspeed_config)[1], "publish_to": args.store,
        "state_uri": f"{args.store}/.runs/{stage.name}/{run}/state", "peak_tflops": launcher.peak_tflops,
        "lineage": "<the stage's lineage: parent, corpus, days, firehose files>",
    }
    show(f"{stage.name} ({stage.method}, {stage.config_class}) on one {args.gpus}-GPU node: "
         f"{launcher.namespace}/{pod.metadata.name}", command, body,
         f"{config_uri} (the stage config, read by TrlParser in the pod)", stage_config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
