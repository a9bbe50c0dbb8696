"""Launching a stage script as a DeepSpeed job through Dagster Pipes.

    local  PipesSubprocessClient runs `deepspeed --num_gpus N <script> --config <stage.yaml>` on
           this machine (on CPU: DeepSpeed's CPU accelerator over gloo, one process);
    k8s    PipesK8sClient (dagster-k8s, the `deploy` extra) runs the same command in a pod of the
           training image on one whole GPU node (one rank per GPU); the config, the parent model,
           the dataset and the catalogue are s3:// URIs the stage fetches itself, and it
           publishes to the S3 checkpoint store. Chosen by SHOPDISTILL_GPU_POD_SPEC (`launcher_from_env`).
Rank 0 alone reports through Pipes (see `shopdistill_assets/training/stages/common.py`).
A job that is not a DeepSpeed program (the rollout job: a vLLM server and the sandbox) is launched
the same way with `runner="python"`: one process, on the same GPU node, reporting through Pipes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from dagster import ConfigurableResource, PipesMessageReader
from dagster_pipes import PipesDefaultMessageWriter
from pydantic import Field

REPO_ROOT = Path(__file__).resolve().parents[1]
DEEPSPEED_CONFIGS = REPO_ROOT / "deploy" / "deepspeed"
GPU_POD_SPEC_ENV = "SHOPDISTILL_GPU_POD_SPEC"
TRAIN_IMAGE_ENV = "SHOPDISTILL_TRAIN_IMAGE"
IMAGE_APP = "/app"  # where the training image installs the project


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


GPU_NODE_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# NCCL inside one node: fail fast on a hung collective instead of waiting for the 30-minute default,
# and say which transport was chosen (the first question when a multi-GPU stage is slow).
NCCL_ENV = {"NCCL_DEBUG": "WARN", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_P2P_LEVEL": "NVL",
            "TORCH_NCCL_BLOCKING_WAIT": "0", "OMP_NUM_THREADS": "8", "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1"}
CACHE_MOUNT = "/cache"  # the image's HF_HOME and TORCH_EXTENSIONS_DIR live here


def gpu_pod_spec(overrides: dict[str, Any] | None = None, *, gpus: int = 8, shm_gi: int = 64,
                 cache_claim: str | None = None, service_account: str | None = None) -> dict[str, Any]:
    """The pod spec (Kubernetes camelCase) a stage runs in: all `gpus` of one GPU node, CPU and
    memory requests sized to them, a large /dev/shm for NCCL, a model cache volume (a claim that
    outlives the pod, or an emptyDir), GPU-node selection and taint toleration, no restarts (a
    failed stage is a failed run, retried by Dagster). `overrides` is SHOPDISTILL_GPU_POD_SPEC:
    pod keys (nodeSelector, tolerations, affinity, serviceAccountName, priorityClassName) and the
    container's `resources` and `env`, which win over these defaults."""
    overrides = dict(overrides or {})
    gpus = int(((overrides.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", gpus))
    resources = {"limits": {"nvidia.com/gpu": str(gpus), "memory": f"{120 * gpus}Gi"},
                 "requests": {"nvidia.com/gpu": str(gpus), "cpu": str(8 * gpus), "memory": f"{96 * gpus}Gi"}}
    for part in ("limits", "requests"):
        resources[part].update((overrides.get("resources") or {}).get(part) or {})
    env = {**NCCL_ENV, **{e["name"]: e["value"] for e in overrides.get("env") or []}}
    cache = ({"name": "cache", "persistentVolumeClaim": {"claimName": cache_claim}} if cache_claim
             else {"name": "cache", "emptyDir": {"sizeLimit": "200Gi"}})
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": overrides.get("nodeSelector") or {"nvidia.com/gpu.present": "true"},
        "tolerations": overrides.get("tolerations") or [GPU_NODE_TAINT],
        "containers": [{
            "name": "dagster-pipes-execution", "resources": resources,
            "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "cache", "mountPath": CACHE_MOUNT}],
        }],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_gi}Gi"}}, cache],
    }
    for key in ("affinity", "serviceAccountName", "priorityClassName"):
        if overrides.get(key):
            spec[key] = overrides[key]
    if service_account and "serviceAccountName" not in spec:
        spec["serviceAccountName"] = service_account
    return spec


def pod_gpus(spec: dict[str, Any]) -> int:
    return int(spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])


def launch_command(script: str, config_uri: str, gpus: int, launcher: str = "deepspeed",
                   master_port: int = 29500) -> list[str]:
    """One process per GPU of the node (DeepSpeed's launcher sets RANK/LOCAL_RANK/WORLD_SIZE)."""
    return [launcher, "--num_gpus", str(gpus), "--num_nodes", "1", "--master_port", str(master_port), script,
            "--config", config_uri]


RUNNERS = ("deepspeed", "python")  # a DeepSpeed program (one rank per GPU) or one process that uses the GPUs itself


def job_command(runner: str, script: str, config_uri: str, gpus: int, program: str,
                master_port: int = 29500) -> list[str]:
    if runner not in RUNNERS:
        raise ValueError(f"runner must be one of {RUNNERS}, got {runner!r}")
    if runner == "python":
        return [program, script, "--config", config_uri]
    return launch_command(script, config_uri, gpus, program, master_port)


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
    """Where and how stage scripts run: `local` (deepspeed on this machine) or `k8s` (a GPU pod)."""

    kind: Literal["local", "k8s"] = Field(default="local", description="local deepspeed, or a Kubernetes GPU pod")
    num_gpus: int = Field(default=1, description="local: processes (CPU: 1); k8s: GPUs of the node unless the pod "
                          "spec says")
    deepspeed_config: str = Field(default="zero2", description="zero2 | zero3 | a JSON file")
    work_dir: str | None = Field(default=None, description="local scratch for stage outputs "
                                 "(default SHOPDISTILL_HOME/train-runs)")
    echo_output: bool = Field(default=True, description="local: also stream the job's output to this process's "
                              "stdout (the run's compute logs); stage.log always has it")
    peak_tflops: float | None = Field(default=None, description="per-GPU peak for MFU reporting (H200 bf16 dense: 989)")
    image: str | None = Field(default=None, description="k8s: the training image")
    namespace: str = Field(default="default", description="k8s: namespace of the training pods")
    pod_spec_json: str = Field(default="{}", description="k8s: SHOPDISTILL_GPU_POD_SPEC, JSON: nodeSelector, "
                               "tolerations, affinity, serviceAccountName, and the container's resources and env")
    cache_claim: str | None = Field(default=None, description="k8s: a PersistentVolumeClaim for the model cache")
    service_account: str | None = Field(default=None, description="k8s: service account (S3 access)")

    @property
    def remote(self) -> bool:
        """The stage shares no folder with the orchestrator: everything travels as s3:// URIs."""
        return self.kind == "k8s"

    def script_path(self, script: str) -> str:
        if self.remote:  # inside the training image, the package is installed
            return f"{IMAGE_APP}/shopdistill_assets/training/stages/{script}"
        return str(REPO_ROOT / "shopdistill_assets" / "training" / "stages" / script)

    def stage_dir(self, stage: str, run_id: str) -> Path:
        if not self.work_dir:
            raise ValueError("TrainingLauncher needs `work_dir` (launcher_from_env sets it to the project home's "
                             "train-runs/)")
        folder = Path(self.work_dir) / stage / run_id
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def output_dir(self, stage: str, run_id: str) -> str:
        return f"{CACHE_MOUNT}/runs/{stage}/{run_id}" if self.remote else str(self.stage_dir(stage, run_id))

    def _pod_spec(self) -> dict[str, Any]:
        return gpu_pod_spec(json.loads(self.pod_spec_json or "{}"), gpus=self.num_gpus, cache_claim=self.cache_claim,
                            service_account=self.service_account)

    @property
    def gpus(self) -> int:
        """The GPUs a job gets: the pod's (its spec may say) or, locally, `num_gpus`."""
        return pod_gpus(self._pod_spec()) if self.remote else self.num_gpus

    def pod(self, script: str, config_uri: str, runner: str = "deepspeed") -> tuple[dict[str, Any], list[str]]:
        """(pod spec, command) of a k8s job: what PipesK8sClient is given."""
        spec = self._pod_spec()
        return spec, job_command(runner, self.script_path(script), config_uri, pod_gpus(spec), runner)

    def launch(self, context: Any, script: str, config_uri: str, output_dir: str,
               env: dict[str, str] | None = None, runner: str = "deepspeed") -> dict[str, Any]:
        """Run the job script on its config (by reference); returns what rank 0 reported."""
        if self.remote:
            return self._launch_k8s(context, script, config_uri, env or {}, runner)
        return self._launch_local(context, script, config_uri, output_dir, env or {}, runner)

    def _launch_local(self, context: Any, script: str, config_uri: str, output_dir: str,
                      env: dict[str, str], runner: str) -> dict[str, Any]:
        from dagster import Failure, PipesSubprocessClient
        from dagster._core.errors import DagsterPipesExecutionError

        program = sys.executable
        if runner == "deepspeed":
            program = shutil.which("deepspeed", path=str(Path(sys.executable).parent)) or shutil.which("deepspeed")
            if program is None:
                raise FileNotFoundError("the `deepspeed` launcher is not installed (pip install '.[train]')")
        port = _free_port()
        command = job_command(runner, self.script_path(script), config_uri, self.num_gpus, program, port)
        # The job's output goes to the run's compute logs and to stage.log, whose end becomes the
        # failure's description: a failed stage says why on the run page and in the CLI.
        log = Path(output_dir) / "stage.log"
        sink = f"tee -a {shlex.quote(str(log))}" if self.echo_output else f"cat >> {shlex.quote(str(log))}"
        shell = f"set -o pipefail; {shlex.join(command)} 2>&1 | {sink}"
        try:
            invocation = PipesSubprocessClient(env={**local_job_env(), **env},
                                               message_reader=WholeLineMessageReader()).run(
                context=context, command=["bash", "-c", shell], cwd=output_dir)
        except DagsterPipesExecutionError as exc:
            raise Failure(description=f"{Path(output_dir).parent.name}: the {runner} job failed ({exc}); its log "
                                      f"{log} ends with:\n{_tail(log)}", allow_retries=False) from None
        finally:
            remove_shm_buffers(port)
        return _reported(invocation)

    def _launch_k8s(self, context: Any, script: str, config_uri: str, env: dict[str, str],
                    runner: str) -> dict[str, Any]:
        from dagster_k8s import PipesK8sClient  # the `deploy` extra

        if not self.image:
            raise ValueError("TrainingLauncher(kind='k8s') needs `image` (SHOPDISTILL_TRAIN_IMAGE)")
        spec, command = self.pod(script, config_uri, runner)
        invocation = PipesK8sClient().run(context=context, image=self.image, command=command,
                                          namespace=self.namespace, base_pod_spec=spec, env=env)
        return _reported(invocation)


def whole_lines(path: str | Path, should_stop: Callable[[], bool], poll_s: float = 0.01) -> Iterator[str]:
    """The lines of a file another process is appending to, each only once it is whole. Dagster's
    file tail (`dagster._utils.tail_file`) hands on what `readline` returns, which is part of a line
    while the writer is still writing it: a large report (a loss curve inlined as a PNG) was read
    half-written under load, the reader thread died on the JSON, and the stage's checkpoint was
    lost. After `should_stop`, what is left is read to the end; a last line without its newline
    is handed on as it is (the writer ended mid-line)."""
    pending = ""
    with open(path, encoding="utf-8") as stream:
        while True:
            piece = stream.readline()
            if piece:
                pending += piece
                if pending.endswith("\n"):
                    yield pending
                    pending = ""
            elif should_stop():
                pending += stream.read()
                yield from (line for line in pending.splitlines(keepends=True) if line.strip())
                return
            else:
                time.sleep(poll_s)


class WholeLineMessageReader(PipesMessageReader):
    """Pipes messages through a temporary file, as PipesSubprocessClient's default reader does,
    each read only once its line is whole (`whole_lines`). Built on the public reader interface
    (`read_messages`, `no_messages_debug_text`), not on Dagster's file reader's private thread."""

    @contextmanager
    def read_messages(self, handler: Any) -> Iterator[dict[str, Any]]:
        closed = threading.Event()

        def read() -> None:
            try:
                for line in whole_lines(path, closed.is_set):
                    handler.handle_message(json.loads(line))
            except BaseException:
                handler.report_pipes_framework_exception(f"{type(self).__name__} reader thread", sys.exc_info())
                raise

        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "messages")
            open(path, "w", encoding="utf-8").close()
            thread = threading.Thread(target=read, name="pipes-whole-lines", daemon=True)
            thread.start()
            try:
                yield {PipesDefaultMessageWriter.FILE_PATH_KEY: path,
                       PipesDefaultMessageWriter.INCLUDE_STDIO_IN_MESSAGES_KEY: False}
            finally:
                closed.set()
                thread.join()

    def no_messages_debug_text(self) -> str:
        return "Attempted to read messages from a local temporary file (whole lines)."


def remove_shm_buffers(port: int, shm: Path = Path("/dev/shm")) -> list[str]:
    """DeepSpeed's CPU allreduce leaves one shared-memory buffer a launch in /dev/shm (69 MB for
    these jobs, named with the master port) and never unlinks it: RAM held until reboot. Removes
    this launch's; returns their names."""
    removed = []
    for path in shm.glob(f"deepspeed_allreduce_buffer_*_{int(port)}_*"):
        path.unlink(missing_ok=True)
        removed.append(path.name)
    return removed


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
