"""Launching a stage script as a DeepSpeed job through Dagster Pipes.

    local  PipesSubprocessClient runs `deepspeed --num_gpus N <script> --config stage.json` on this
           machine (on CPU: DeepSpeed's CPU accelerator over gloo, one process);
    k8s    PipesK8sClient (dagster-k8s, the `deploy` extra) runs the same command in a pod of the
           training image with GPU limits; the stage then reads its dataset from the S3 lake and
           publishes to the S3 checkpoint store itself.
Rank 0 alone reports through Pipes (see `shopdistill_assets/train/common.py`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import socket
import sys
from pathlib import Path
from typing import Any, Literal

from dagster import ConfigurableResource
from pydantic import Field

REPO_ROOT = Path(__file__).resolve().parents[1]
DEEPSPEED_CONFIGS = REPO_ROOT / "deploy" / "deepspeed"
SCRIPTS = {"sft": "sft.py", "kto": "kto.py", "dr_grpo": "dr_grpo.py"}
CONFIG_ENV = "SHOPDISTILL_STAGE_CONFIG"


def deepspeed_config(name_or_path: str) -> tuple[str, dict[str, Any]]:
    """(name, config) for `zero2` / `zero3` (deploy/deepspeed/<name>.json) or a JSON file path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = DEEPSPEED_CONFIGS / f"{name_or_path}.json"
    if not path.is_file():
        raise FileNotFoundError(f"DeepSpeed config {name_or_path!r} not found (looked at {path}); "
                                f"use zero2, zero3 or a JSON file")
    return path.stem, json.loads(path.read_text())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def training_pod_spec(*, gpus: int, node_selector: dict[str, str] | None = None, shm_gi: int = 64,
                      tolerate_gpu_taint: bool = True, service_account: str | None = None) -> dict[str, Any]:
    """The pod spec PipesK8sClient merges its container into: GPU limits, GPU nodes, a large
    /dev/shm for NCCL, and no restarts (a failed stage is a failed run, retried by Dagster)."""
    spec: dict[str, Any] = {
        "restart_policy": "Never",
        "containers": [{
            "name": "dagster-pipes-execution",
            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}},
            "volume_mounts": [{"name": "dshm", "mount_path": "/dev/shm"}],
        }],
        "volumes": [{"name": "dshm", "empty_dir": {"medium": "Memory", "size_limit": f"{shm_gi}Gi"}}],
    }
    if node_selector:
        spec["node_selector"] = node_selector
    if tolerate_gpu_taint:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if service_account:
        spec["service_account_name"] = service_account
    return spec


def local_job_env() -> dict[str, str]:
    """Environment defaults of a local DeepSpeed job (the caller's own settings win).

    TORCH_EXTENSIONS_DIR: DeepSpeed JIT-builds an op (`deepspeed_shm_comm`) on its CPU
    accelerator, by default under ~/.cache/torch_extensions, keyed by name only. Two virtual
    environments (two clones, a worktree) then rebuild it in turn on every launch, 25-140 s
    each; one folder per environment builds it once. It stays in the user's cache (the
    environment itself may be read-only, e.g. a system Python in an image)."""
    env = {"TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    for name, default in (("OMP_NUM_THREADS", str(os.cpu_count() or 1)),
                          ("TORCH_EXTENSIONS_DIR", str(torch_extensions_dir()))):
        env[name] = os.environ.get(name, default)
    return env


def torch_extensions_dir() -> Path:
    """This environment's own folder for JIT-built ops: ~/.cache/torch_extensions/<env>-<hash>."""
    prefix = str(Path(sys.prefix).resolve())
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    name = Path(prefix).name.lstrip(".") or "env"
    return cache / "torch_extensions" / f"{name}-{hashlib.sha1(prefix.encode()).hexdigest()[:12]}"


class TrainingLauncher(ConfigurableResource):
    """Where and how stage scripts run."""

    kind: Literal["local", "k8s"] = Field(default="local", description="local deepspeed, or a Kubernetes pod")
    num_gpus: int = Field(default=1, description="processes per node (local CPU: 1)")
    deepspeed_config: str = Field(default="zero2", description="zero2 | zero3 | a JSON file")
    work_dir: str | None = Field(default=None, description="local scratch for stage configs and outputs "
                                 "(default SHOPDISTILL_HOME/train-runs)")
    echo_output: bool = Field(default=True, description="local: also stream the job's output to this process's "
                              "stdout (the run's compute logs); stage.log always has it")
    peak_tflops: float | None = Field(default=None, description="per-GPU peak for MFU reporting (H200 bf16 dense: 989)")
    image: str | None = Field(default=None, description="k8s: the training image")
    namespace: str = Field(default="default", description="k8s: namespace of the training pods")
    node_selector_json: str = Field(default="{}", description='k8s: e.g. {"nvidia.com/gpu.product": "NVIDIA-H200"}')
    service_account: str | None = Field(default=None, description="k8s: service account (S3 access)")

    def script_path(self, method: str) -> str:
        if self.kind == "k8s":  # inside the training image, the package is installed
            return f"/app/shopdistill_assets/train/{SCRIPTS[method]}"
        return str(REPO_ROOT / "shopdistill_assets" / "train" / SCRIPTS[method])

    def stage_dir(self, stage: str, run_id: str) -> Path:
        from shopdistill_assets.instance import project_home

        root = Path(self.work_dir) if self.work_dir else project_home() / "train-runs"
        folder = root / stage / run_id
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def launch(self, context: Any, method: str, stage_config: dict[str, Any]) -> dict[str, Any]:
        """Run the stage; returns what rank 0 reported (metadata, data_version)."""
        stage_config = {**stage_config, "peak_tflops": self.peak_tflops}
        if self.kind == "k8s":
            return self._launch_k8s(context, method, stage_config)
        return self._launch_local(context, method, stage_config)

    def _launch_local(self, context: Any, method: str, stage_config: dict[str, Any]) -> dict[str, Any]:
        from dagster import Failure, PipesSubprocessClient
        from dagster._core.errors import DagsterPipesExecutionError

        config_path = Path(stage_config["output_dir"]) / "stage.json"
        config_path.write_text(json.dumps(stage_config, indent=1, default=str))
        launcher = shutil.which("deepspeed", path=str(Path(sys.executable).parent)) or shutil.which("deepspeed")
        if launcher is None:
            raise FileNotFoundError("the `deepspeed` launcher is not installed (pip install '.[train]')")
        command = [launcher, "--num_gpus", str(self.num_gpus), "--master_port", str(_free_port()),
                   self.script_path(method), "--config", str(config_path)]
        env = local_job_env()
        # The job's output goes to the run's compute logs and to stage.log, whose end becomes the
        # failure's description: a failed stage says why on the run page and in the CLI.
        log = Path(stage_config["output_dir"]) / "stage.log"
        sink = f"tee -a {shlex.quote(str(log))}" if self.echo_output else f"cat >> {shlex.quote(str(log))}"
        shell = f"set -o pipefail; {shlex.join(command)} 2>&1 | {sink}"
        try:
            invocation = PipesSubprocessClient(env=env).run(context=context, command=["bash", "-c", shell],
                                                            cwd=stage_config["output_dir"])
        except DagsterPipesExecutionError as exc:
            raise Failure(description=f"{stage_config['stage']}: the DeepSpeed job failed ({exc}); its log {log} "
                                      f"ends with:\n{_tail(log)}", allow_retries=False) from None
        return _reported(invocation)

    def _launch_k8s(self, context: Any, method: str, stage_config: dict[str, Any]) -> dict[str, Any]:
        from dagster_k8s import PipesK8sClient  # the `deploy` extra

        if not self.image:
            raise ValueError("TrainingLauncher(kind='k8s') needs `image`")
        # The stage config travels as an environment variable: the pod shares no folder with us.
        command = ["deepspeed", "--num_gpus", str(self.num_gpus), self.script_path(method),
                   "--config", f"env:{CONFIG_ENV}"]
        spec = training_pod_spec(gpus=self.num_gpus, node_selector=json.loads(self.node_selector_json) or None,
                                 service_account=self.service_account)
        invocation = PipesK8sClient().run(context=context, image=self.image, command=command,
                                          namespace=self.namespace, base_pod_spec=spec,
                                          env={CONFIG_ENV: json.dumps(stage_config, default=str)})
        return _reported(invocation)


def _tail(log: Path, lines: int = 12) -> str:
    """The last lines of a job log, without the launcher's own chatter."""
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    noise = ("[launch.py", "[real_accelerator.py", "[runner.py", "Loading weights", "it/s]")
    useful = [line for line in text if line.strip() and not any(n in line for n in noise)]
    return "\n".join(useful[-lines:])


def _reported(invocation: Any) -> dict[str, Any]:
    results = invocation.get_results()
    if not results:
        return {"metadata": {}, "data_version": None}
    result = results[-1]
    metadata = {k: getattr(v, "value", v) for k, v in (result.metadata or {}).items()}
    version = getattr(result, "data_version", None)
    return {"metadata": metadata, "data_version": getattr(version, "value", version)}
