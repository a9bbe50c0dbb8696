"""The code location loads whole, and the instance files configure what they claim."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def test_definitions_load_and_validate():
    from shopdistill_assets.definitions import defs

    dg.Definitions.validate_loadable(defs)
    repository = defs.get_repository_def()
    asset_keys = {key.to_user_string() for key in repository.asset_graph.get_all_asset_keys()}
    assert "raw_firehose" in asset_keys
    assert set(defs.resources) == {"firehose", "lake", "checkpoints", "launcher", "oro_api"}
    for stage in ("sft", "resft", "teacher_sft", "kto", "dr_grpo"):
        assert f"{stage}_checkpoint" in asset_keys
        assert defs.resolve_job_def(f"train_{stage}") is not None


def test_sensor_schedule_and_automation_are_declared():
    from shopdistill_assets.definitions import defs

    sensor = defs.resolve_sensor_def("firehose_day_sensor")
    assert sensor.job_name == "corpus_daily"
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert defs.resolve_schedule_def("corpus_daily_schedule").default_status == dg.DefaultScheduleStatus.STOPPED
    graph = defs.get_repository_def().asset_graph
    for key in ("leak_clusters", "split_traces", "train_corpus", "heldout_eval_set", "corpus_funnel"):
        assert graph.get(dg.AssetKey(key)).automation_condition is not None, key


# What a fresh instance shows on the automation page before anyone touches a switch.
EXPECTED_STATUS = {
    ("sensor", "firehose_day_sensor"): "running",
    ("sensor", "default_automation_condition_sensor"): "running",
    ("sensor", "checkpoint_eval_sensor"): "running",
    ("schedule", "corpus_daily_schedule"): "stopped",
    ("sensor", "oro_api_day_sensor"): "stopped",  # calls an outside API: on where that source is used
}


def test_every_sensor_and_schedule_has_its_documented_status_on_a_fresh_instance(tmp_path):
    from dagster._core.scheduler.instigation import InstigatorStatus
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import ModuleTarget

    running = {InstigatorStatus.RUNNING, InstigatorStatus.DECLARED_IN_CODE}
    target = ModuleTarget(module_name="shopdistill_assets.definitions", attribute=None, working_directory=str(REPO),
                          location_name="shopdistill")
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance, \
            WorkspaceProcessContext(instance, target) as workspace:
        location = workspace.create_request_context().get_code_location("shopdistill")
        (repository,) = location.get_repositories().values()
        seen = {}
        for kind, instigators in (("sensor", repository.get_sensors()), ("schedule", repository.get_schedules())):
            for instigator in instigators:
                stored = instance.get_instigator_state(instigator.get_remote_origin_id(), instigator.selector_id)
                status = instigator.get_current_instigator_state(stored).status
                seen[(kind, instigator.name)] = "running" if status in running else "stopped"
    assert seen == EXPECTED_STATUS


def test_the_checkpoint_sensor_evaluates_new_checkpoints_but_not_ones_already_evaluated():
    from jobs.training import checkpoint_eval_sensor

    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("policies", ["sft", "resft"])
        instance.report_runless_asset_event(dg.AssetMaterialization("sft_checkpoint"))
        instance.report_runless_asset_event(dg.AssetMaterialization("resft_checkpoint"))
        # resft was evaluated after its checkpoint (what the demo does): nothing to do for it.
        instance.report_runless_asset_event(dg.AssetMaterialization("policy_eval", partition="resft"))
        context = dg.build_sensor_context(instance=instance)
        requests = list(checkpoint_eval_sensor(context))
        assert [r.partition_key for r in requests] == ["sft"]
        again = list(checkpoint_eval_sensor(dg.build_sensor_context(instance=instance, cursor=context.cursor)))
        assert again == []


def root_env(home: Path) -> dict:
    """A new user's shell at the repo root: no DAGSTER_HOME, no SHOPDISTILL_* but the home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHOPDISTILL_", "DAGSTER_"))}
    return {**env, "SHOPDISTILL_HOME": str(home)}


@pytest.mark.parametrize("command", [
    ["dagster", "definitions", "validate", "-w", "workspace.yaml"],
    ["dagster", "definitions", "validate"],  # [tool.dagster] in pyproject.toml
    ["dg", "check", "defs"],
    ["dg", "list", "defs", "--json"],
], ids=" ".join)
def test_dagster_and_dg_commands_work_at_the_repo_root_without_dagster_home(command, tmp_path):
    binary = Path(sys.executable).parent / command[0]
    completed = subprocess.run([str(binary), *command[1:]], cwd=REPO, env=root_env(tmp_path), capture_output=True,
                               text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "Traceback" not in completed.stderr
    if command[:2] == ["dg", "list"]:
        assert "corpus_funnel" in completed.stdout


def test_dagster_asset_materialize_at_the_repo_root_without_dagster_home(tmp_path):
    before = set(REPO.glob(".tmp_dagster_home_*"))
    completed = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "asset", "materialize", "-m", "shopdistill_assets.definitions",
         "--select", "corpus_funnel"], cwd=REPO, env=root_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "RUN_SUCCESS" in completed.stdout + completed.stderr
    assert set(REPO.glob(".tmp_dagster_home_*")) <= before  # Dagster's temporary instance is gone again


def test_selecting_one_table_of_the_corpus_step_runs_the_step(tiny_day, tmp_path):
    """`dagster asset materialize --select gated_traces`: the one pass writes all five tables and
    Dagster records all five, with the selected table's blocking check."""
    env = {**root_env(tmp_path), "SHOPDISTILL_FIREHOSE": str(tiny_day.root)}
    completed = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "asset", "materialize", "-m", "shopdistill_assets.definitions",
         "--select", "raw_firehose,gated_traces", "--partition", tiny_day.day], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=300)
    log = completed.stdout + completed.stderr
    assert completed.returncode == 0 and "RUN_SUCCESS" in log, log[-3000:]
    for table in ("normalized_traces", "agentic_traces", "subtask_traces", "gated_traces", "rejected_traces"):
        assert f"Materialized value {table}." in log, table
        assert (tmp_path / "lake" / table / f"day={tiny_day.day}").is_dir()
    assert "Asset check 'conservation' on 'gated_traces' passed" in log


def test_corpus_daily_job_and_schedule():
    from shopdistill_assets.definitions import defs
    from shopdistill_assets.partitions import daily_partitions

    job = defs.resolve_job_def("corpus_daily")
    # The "corpus" group is selected before it has members; the selection must still resolve.
    assert dg.AssetKey("raw_firehose") in job.asset_layer.executable_asset_keys
    assert job.partitions_def == daily_partitions
    schedule = defs.resolve_schedule_def("corpus_daily_schedule")
    assert schedule.job_name == "corpus_daily"
    assert schedule.cron_schedule == "0 2 * * *"
    assert schedule.execution_timezone == "UTC"


def test_daily_partitions_start_and_timezone():
    from shopdistill_assets.partitions import START_DATE, daily_partitions

    keys = daily_partitions.get_partition_keys()
    assert keys[0] == START_DATE == os.environ.get("SHOPDISTILL_START_DATE", "2026-11-01")
    assert daily_partitions.timezone == "UTC"


def test_resources_read_the_shopdistill_variables(monkeypatch, tmp_path):
    from shopdistill_assets.definitions import build_definitions

    monkeypatch.setenv("SHOPDISTILL_HOME", str(tmp_path))
    monkeypatch.setenv("SHOPDISTILL_LAKE", "s3://lake/prod")
    monkeypatch.setenv("SHOPDISTILL_S3_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.delenv("SHOPDISTILL_FIREHOSE", raising=False)

    resources = build_definitions().resources
    # EnvVars, as the UI shows them; the unset firehose got its default written into the environment.
    assert resources["lake"].root == dg.EnvVar("SHOPDISTILL_LAKE")
    assert resources["firehose"].root == dg.EnvVar("SHOPDISTILL_FIREHOSE")
    assert resources["lake"].endpoint_url == dg.EnvVar("SHOPDISTILL_S3_ENDPOINT_URL")
    assert os.environ["SHOPDISTILL_FIREHOSE"] == str(tmp_path / "arena" / "firehose")
    assert os.environ["SHOPDISTILL_LAKE"] == "s3://lake/prod"

    given = build_definitions(firehose_root="s3://arena/firehose", lake_root=str(tmp_path / "lake"))
    assert given.resources["firehose"].root == dg.EnvVar("SHOPDISTILL_FIREHOSE")
    assert os.environ["SHOPDISTILL_FIREHOSE"] == "s3://arena/firehose"
    assert os.environ["SHOPDISTILL_LAKE"] == str(tmp_path / "lake")

    monkeypatch.delenv("SHOPDISTILL_S3_ENDPOINT_URL")
    assert build_definitions().resources["lake"].endpoint_url is None  # unset: AWS itself


def test_local_instance_lives_under_dagster_home(monkeypatch, tmp_path):
    home = tmp_path / "dagster"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))

    instance = dg.DagsterInstance.from_config(str(home))
    try:
        concurrency = instance.get_concurrency_config()
        assert concurrency.run_queue_config.max_concurrent_runs == 4
        assert concurrency.pool_config.default_pool_limit == 1  # the gpu pool's limit
        assert (home / "history" / "runs.db").is_file()
    finally:
        instance.dispose()


def test_dagster_cli_validates_the_code_location(tmp_path):
    home = tmp_path / "dagster"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    env = dict(os.environ, DAGSTER_HOME=str(home), SHOPDISTILL_HOME=str(tmp_path))
    command = [sys.executable, "-m", "dagster", "definitions", "validate"]
    completed = subprocess.run(
        [*command, "-m", "shopdistill_assets.definitions"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_workspace_loads_the_definitions_module():
    workspace = yaml.safe_load((REPO / "workspace.yaml").read_text())
    (location,) = workspace["load_from"]
    assert location["python_module"]["module_name"] == "shopdistill_assets.definitions"


def test_production_instance_config_is_valid(monkeypatch, tmp_path):
    pytest.importorskip("dagster_postgres")
    k8s = pytest.importorskip("dagster_k8s")
    from dagster._config import process_config
    from dagster._core.instance.config import dagster_instance_config
    from dagster_aws.s3.compute_log_manager import S3ComputeLogManager

    for var in ["DAGSTER_PG_HOST", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB"]:
        monkeypatch.setenv(var, "dagster")
    monkeypatch.setenv("DAGSTER_K8S_NAMESPACE", "shopdistill")
    monkeypatch.setenv("SHOPDISTILL_IMAGE", "registry.example/shopdistill:1")
    monkeypatch.setenv("SHOPDISTILL_LOG_BUCKET", "logs")
    shutil.copy(REPO / "deploy" / "dagster.yaml", tmp_path / "dagster.yaml")

    config, _ = dagster_instance_config(str(tmp_path))  # raises on a schema error
    assert "postgres" in config["storage"]
    assert config["concurrency"]["pools"]["default_limit"] == 1
    for section, cls in [
        ("run_launcher", k8s.K8sRunLauncher),
        ("compute_logs", S3ComputeLogManager),
    ]:
        assert config[section]["class"] == cls.__name__
        checked = process_config(cls.config_type(), config[section]["config"])
        assert checked.success, checked.errors
    launcher = process_config(k8s.K8sRunLauncher.config_type(), config["run_launcher"]["config"])
    assert launcher.value["job_image"] == "registry.example/shopdistill:1"
