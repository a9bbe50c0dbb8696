"""The launcher the settings name (the one place that reads them for training): a GPU pod on
Kubernetes when SHOPDISTILL_GPU_POD_SPEC is set (Helm sets it), else local `deepspeed`."""

from __future__ import annotations

import json
import os
from typing import Any

from resources.launcher import GPU_POD_SPEC_ENV, TRAIN_IMAGE_ENV, TrainingLauncher
from shopdistill_assets import settings
from shopdistill_assets.instance import project_home


def launcher_from_env(environ: Any = os.environ, **local: Any) -> TrainingLauncher:
    """The launcher the settings name: a GPU pod when SHOPDISTILL_GPU_POD_SPEC is set (Helm sets
    it), else local deepspeed. SHOPDISTILL_TRAIN_IMAGE names the image (default: the code image)."""
    deepspeed = environ.get(settings.DEEPSPEED) or settings.DEFAULT_DEEPSPEED
    spec = environ.get(GPU_POD_SPEC_ENV)
    if not spec:
        return TrainingLauncher(deepspeed_config=deepspeed, **{"work_dir": str(project_home() / "train-runs"), **local})
    parsed = json.loads(spec)
    if not isinstance(parsed, dict):
        raise ValueError(f"{GPU_POD_SPEC_ENV} must be a JSON object (nodeSelector, tolerations, resources, …)")
    return TrainingLauncher(kind="k8s", deepspeed_config=deepspeed, pod_spec_json=spec,
                            work_dir=str(project_home() / "train-runs"),
                            image=environ.get(TRAIN_IMAGE_ENV) or environ.get("SHOPDISTILL_IMAGE"),
                            namespace=environ.get("DAGSTER_K8S_NAMESPACE") or "default",
                            cache_claim=environ.get("SHOPDISTILL_MODEL_CACHE_CLAIM") or None,
                            peak_tflops=float(environ["SHOPDISTILL_PEAK_TFLOPS"])
                            if environ.get("SHOPDISTILL_PEAK_TFLOPS") else None)
