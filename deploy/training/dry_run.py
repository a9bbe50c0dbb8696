"""Dry run of the production path: the pod and command a stage would be launched with.

    python deploy/training/dry_run.py [--stage sft] [--gpus 8] [--gpu-product NVIDIA-H100-80GB-HBM3]
                                      [--image ghcr.io/shopdistill/shopdistill-train:TAG] [--model Qwen/Qwen3-4B]

Builds the launcher exactly as the Helm deployment does (SHOPDISTILL_GPU_POD_SPEC set), then the
pod with dagster-k8s's own `build_pod_body` (what `PipesK8sClient` submits) and prints it as
Kubernetes YAML, with the stage config the pod reads by reference. Needs no cluster.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    import yaml
    from dagster_k8s.pipes import build_pod_body
    from kubernetes.client import ApiClient

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
    args = parser.parse_args()

    stage = STAGES[args.stage]
    pod_spec = {"nodeSelector": {"nvidia.com/gpu.product": args.gpu_product},
                "resources": {"limits": {"nvidia.com/gpu": str(args.gpus)}}}
    launcher = launcher_from_env({"SHOPDISTILL_GPU_POD_SPEC": json.dumps(pod_spec), "SHOPDISTILL_TRAIN_IMAGE": args.image,
                                  "SHOPDISTILL_DEEPSPEED": args.deepspeed, "DAGSTER_K8S_NAMESPACE": "shopdistill",
                                  "SHOPDISTILL_PEAK_TFLOPS": "989"})
    run = "00000000-dry-run"
    config_uri = f"{args.store}/.runs/{stage.name}/{run}/{run}.yaml"
    spec, command = launcher.pod(stage.script, config_uri)
    pod = build_pod_body(f"dagster-{stage.name}-{run[:8]}", launcher.image, command,
                         {"DAGSTER_PIPES_CONTEXT": "<set by Dagster Pipes>", "DAGSTER_PIPES_MESSAGES": "<set by Pipes>",
                          "SHOPDISTILL_S3_ENDPOINT_URL": ""}, {"labels": {"app.kubernetes.io/name": "shopdistill-train"}},
                         spec)
    body = ApiClient().sanitize_for_serialization(pod)
    stage_config = {
        "stage": stage.name, "model_name_or_path": args.model if stage.parent is None else
        f"{args.store}/{stage.parent}/<newest version>", "dataset": f"s3://shopdistill-lake/snapshots/{stage.dataset}/"
        "<version>/<generation>", "output_dir": launcher.output_dir(stage.name, run),
        "deepspeed": deepspeed_config(launcher.deepspeed_config)[1], "publish_to": args.store,
        "state_uri": f"{args.store}/.runs/{stage.name}/{run}/state", "peak_tflops": launcher.peak_tflops,
        "lineage": "<the stage's lineage: parent, corpus, days, firehose files>",
    }
    print(f"# {stage.name} ({stage.method}, {stage.config_class}) on one {args.gpus}-GPU node: "
          f"{launcher.namespace}/{pod.metadata.name}")
    print("# command: " + " ".join(command))
    print(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", **body}, sort_keys=False))
    print(f"# {config_uri} (the stage config, read by TrlParser in the pod):")
    print(yaml.safe_dump(stage_config, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
