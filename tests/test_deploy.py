"""deploy/ is checked where a checker runs here (no docker, no helm): the compose file and the
Helm values parse and match a schema of what they must say, the images install this project,
and both production instance files load with dummy environment values."""

from __future__ import annotations

import importlib
import re
import shutil
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
REPO = DEPLOY.parent

_ENV_REF = re.compile(r"(?<!\$)\$\{([A-Z0-9_]+)\}")
SERVICE = {"type": "object", "properties": {
    "image": {"type": "string"}, "build": {"type": "object", "required": ["context", "dockerfile"]},
    "command": {"type": "array", "items": {"type": "string"}},
    "environment": {"type": "object", "additionalProperties": {"type": ["string", "number"]}},
    "depends_on": {"type": "object", "additionalProperties": {
        "type": "object", "properties": {"condition": {
            "enum": ["service_started", "service_healthy", "service_completed_successfully"]}}}},
    "ports": {"type": "array", "items": {"type": "string", "pattern": r"^127\.0\.0\.1:\d+:\d+$"}},
    "volumes": {"type": "array", "items": {"type": "string"}}},
    "anyOf": [{"required": ["image"]}, {"required": ["build"]}]}
COMPOSE = {"type": "object", "required": ["services"], "properties": {
    "services": {"type": "object", "required": ["postgres", "minio", "code", "webserver", "daemon"],
                 "additionalProperties": SERVICE},
    "volumes": {"type": "object"}}}
K8S_ENV_SOURCES = {"type": "array", "items": {"type": "object", "required": ["name"]}}
HELM = {"type": "object", "required": ["dagster-user-deployments", "runLauncher", "postgresql", "dagsterDaemon"],
        "properties": {
            "dagster-user-deployments": {"type": "object", "required": ["deployments"], "properties": {
                "deployments": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["name", "image", "dagsterApiGrpcArgs", "port"],
                    "properties": {"image": {"type": "object", "required": ["repository", "tag", "pullPolicy"]},
                                   "dagsterApiGrpcArgs": {"type": "array", "items": {"type": "string"}},
                                   "port": {"type": "integer"}, "envConfigMaps": K8S_ENV_SOURCES,
                                   "envSecrets": K8S_ENV_SOURCES}}}}},
            "runLauncher": {"type": "object", "required": ["type", "config"], "properties": {
                "type": {"const": "K8sRunLauncher"},
                "config": {"type": "object", "required": ["k8sRunLauncher"], "properties": {
                    "k8sRunLauncher": {"type": "object", "properties": {
                        "envConfigMaps": K8S_ENV_SOURCES, "envSecrets": K8S_ENV_SOURCES,
                        "runK8sConfig": {"type": "object", "additionalProperties": False, "properties": {
                            k: {"type": "object"} for k in ("containerConfig", "podSpecConfig", "podTemplateSpecMetadata",
                                                            "jobSpecConfig", "jobMetadata")}}}}}}}},
            "dagsterDaemon": {"type": "object", "properties": {"runCoordinator": {"type": "object"}}}}}


def load(name: str):
    return yaml.safe_load((DEPLOY / name).read_text())


def test_compose_file_is_complete_and_consistent():
    compose = load("compose/docker-compose.yaml")
    jsonschema.validate(compose, COMPOSE)
    services = compose["services"]
    for name, service in services.items():
        assert set(service.get("depends_on", {})) <= set(services), name
    text = (DEPLOY / "compose" / "docker-compose.yaml").read_text()
    defined = {line.split("=", 1)[0] for line in (DEPLOY / "compose" / ".env.example").read_text().splitlines()
               if "=" in line and not line.startswith("#")}
    assert set(_ENV_REF.findall(text)) <= defined, set(_ENV_REF.findall(text)) - defined
    env = services["code"]["environment"]
    assert {"SHOPDISTILL_FIREHOSE", "SHOPDISTILL_LAKE", "SHOPDISTILL_S3_ENDPOINT_URL", "DAGSTER_PG_HOST"} <= set(env)
    assert services["webserver"]["environment"] == env == services["daemon"]["environment"]
    workspace = load("compose/workspace.yaml")["load_from"][0]["grpc_server"]
    assert workspace["host"] == "code" and workspace["port"] == 4000


def test_the_training_image_python_is_the_base_images():
    """ubuntu24.04 ships python3.12: the image installs that one (3.11 is not in its archive)."""
    dockerfile = (DEPLOY / "training" / "Dockerfile").read_text()
    base = re.search(r"^FROM (\S+)", dockerfile, re.M).group(1)
    assert base.endswith("ubuntu24.04") and "python3.12" in dockerfile and "python3.11" not in dockerfile
    for path in re.findall(r"^COPY (\S+)", dockerfile, re.M):
        assert (REPO / path).exists(), path


def test_the_training_image_has_vllm_pinned_to_what_trl_supports():
    """vLLM (the rollout job's server, GRPO's `use_vllm`) is the `vllm` extra, installed in the
    training image and nowhere else (`make setup` and CI install no CUDA build): pinned inside the
    range the installed TRL accepts, beside the torch the image and `train` pin."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement
    from packaging.version import Version

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (pin,) = [Requirement(r) for r in extras["vllm"]]
    version = next(iter(pin.specifier)).version
    assert pin.name == "vllm" and str(pin.specifier) == f"=={version}"
    trl_range = next(Requirement(r) for r in requires("trl") if r.startswith("vllm"))
    assert trl_range.specifier.contains(version)
    assert Version(version) >= Version("0.28")  # TRL's weight transfer (vllm_client.py) needs 0.28
    assert not any(Requirement(r).name == "vllm" for name in ("train", "dev", "deploy") for r in extras[name])
    assert '".[train,dev,deploy]"' in (REPO / "Makefile").read_text()
    dockerfile = (DEPLOY / "training" / "Dockerfile").read_text()
    assert 'pip install ".[train,vllm]"' in dockerfile
    torch = next(r for r in extras["train"] if r.startswith("torch"))
    assert f"pip install {torch}" in dockerfile and "--index-url" not in dockerfile  # PyPI's CUDA 13.0 build
    assert re.search(r"^FROM nvidia/cuda:13\.", dockerfile, re.M)  # vLLM 0.30's wheel is a CUDA 13 build


def test_the_training_recipe_uses_flags_its_scripts_have():
    """Every command of deploy/training/README.md that runs one of our scripts names flags that
    script declares (the recipe once said `--model-size`, which benchmarks/training.py lacks)."""
    text = (DEPLOY / "training" / "README.md").read_text()
    scripts = {"benchmarks/training.py", "deploy/training/dry_run.py",
               "shopdistill_assets/training/stages/rollouts.py"}
    seen = set()
    for script in scripts:
        source = (REPO / script).read_text()
        declared = set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", source))
        declared |= {f"--{name}" for name in re.findall(r"^    (\w+): .*= field\(", source, re.M)}
        for command in re.findall(rf"{re.escape(script)}([^`]*)", text):
            seen.add(script)
            used = set(re.findall(r"(--[\w-]+)", command))
            assert used <= declared, (script, used - declared)
    assert seen == scripts


def test_the_image_installs_this_project_and_serves_its_code_location():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    module = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["dagster"]["module_name"]
    assert 'pip install --no-cache-dir ".[deploy]"' in dockerfile
    assert f'"-m", "{module}"]' in dockerfile and '"-p", "4000"' in dockerfile
    for path in re.findall(r"^COPY (\S+)", dockerfile, re.M):
        assert (REPO / path).exists(), path


def test_helm_values_match_the_chart_keys_we_use():
    values = load("helm/values.yaml")
    jsonschema.validate(values, HELM)
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    module = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["dagster"]["module_name"]
    assert deployment["dagsterApiGrpcArgs"] == ["-m", module]
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    production = load("dagster.yaml")["run_launcher"]["config"]
    assert [c["name"] for c in launcher["envConfigMaps"]] == production["env_config_maps"]
    assert [s["name"] for s in launcher["envSecrets"]] == production["env_secrets"]
    env = {e["name"]: e["value"] for e in deployment["env"]}
    gpu = yaml.safe_load(env["SHOPDISTILL_GPU_POD_SPEC"])
    assert gpu["resources"]["limits"]["nvidia.com/gpu"] == "8"  # a whole node: one rank per GPU
    assert gpu["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert deployment["includeConfigInLaunchedRuns"]["enabled"]  # run workers see these settings
    from shopdistill_assets.training.launch import launcher_from_env  # what the run worker builds from them

    launcher = launcher_from_env(env)
    assert launcher.kind == "k8s" and launcher.image == env["SHOPDISTILL_TRAIN_IMAGE"] and launcher.peak_tflops == 989
    spec, command = launcher.pod("sft.py", "s3://b/ckpt/.runs/sft/r/r.yaml")
    assert command[:3] == ["deepspeed", "--num_gpus", "8"] and spec["tolerations"] == gpu["tolerations"]


@pytest.mark.parametrize("name", ["dagster.yaml", "compose/dagster.yaml"])
def test_production_instance_files_load_with_dummy_env(name, tmp_path, monkeypatch):
    pytest.importorskip("dagster_postgres")  # the `deploy` extra, which `make setup` installs
    from dagster._config import process_config
    from dagster._core.instance.config import dagster_instance_config

    for var in ("DAGSTER_PG_HOST", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB", "DAGSTER_K8S_NAMESPACE",
                "SHOPDISTILL_IMAGE", "SHOPDISTILL_LOG_BUCKET", "SHOPDISTILL_S3_ENDPOINT_URL"):
        monkeypatch.setenv(var, "http://dummy:9000" if var.endswith("URL") else "dummy")
    shutil.copy(DEPLOY / name, tmp_path / "dagster.yaml")
    config, _ = dagster_instance_config(str(tmp_path))  # the instance schema, storage included
    assert "postgres" in config["storage"]
    for section in ("run_launcher", "compute_logs"):
        entry = config[section]
        cls = getattr(importlib.import_module(entry["module"]), entry["class"])
        checked = process_config(cls.config_type(), entry.get("config") or {})
        assert checked.success, (section, checked.errors)
