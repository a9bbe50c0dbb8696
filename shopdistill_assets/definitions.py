"""The code location: every asset, check, job, schedule and sensor, with resources from the
environment.

Resources read `EnvVar`s (shown as such in the UI); `settings.export_roots()` fills in the
defaults below at load, so every process that loads this module (the CLI, `dagster dev`, the
daemon's sensors, run workers of schedules and backfills) resolves the same roots:

  SHOPDISTILL_HOME             project home, default `.shopdistill` in the working directory
  SHOPDISTILL_FIREHOSE         firehose root (folder or s3://bucket/prefix),
                               default `$SHOPDISTILL_HOME/arena/firehose` (the simulator's)
  SHOPDISTILL_LAKE             lake root (folder or s3://…), default `$SHOPDISTILL_HOME/lake`
  SHOPDISTILL_S3_ENDPOINT_URL  S3-compatible endpoint for both, e.g. a MinIO or moto server
  SHOPDISTILL_START_DATE       first daily partition, default 2026-11-01
  SHOPDISTILL_ORO_API_URL      ORO's public API for oro_api_day, default https://api.oroagents.com
  SHOPDISTILL_ORO_API_KEY      optional bearer token for it (never in metadata, logs or the lake)
  SHOPDISTILL_ORO_LANDING      landing zone of ORO artifacts, default <firehose root>/_oro_landing
AWS credentials and region come from boto3's usual chain (AWS_* variables, profile, role).
"""

from __future__ import annotations

import os

from dagster import (
    AssetSelection,
    AssetSpec,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    Definitions,
    EnvVar,
    in_process_executor,
)

from jobs import CONDITIONS, corpus_daily_job, corpus_daily_schedule, firehose_day_sensor
from jobs.training import TRAINING_JOBS, TRAINING_SENSORS
from resources.checkpoints import CheckpointStoreResource
from resources.firehose import FirehoseResource
from resources.lake import LakeResource
from resources.oro_api import OroApiResource
from shopdistill_assets import settings
from shopdistill_assets.corpus.assets import CORPUS_ASSETS, CORPUS_CHECKS
from shopdistill_assets.corpus.day_funnel_assets import FUNNEL_ASSETS
from shopdistill_assets.evaluation.assets import EVAL_ASSETS, EVAL_CHECKS
from shopdistill_assets.ingest.assets import raw_firehose
from shopdistill_assets.ingest.oro_assets import oro_api_daily_job, oro_api_day, oro_api_day_sensor
from shopdistill_assets.split.assets import SPLIT_ASSETS, SPLIT_CHECKS
from shopdistill_assets.training.assets import TRAINING_ASSETS
from shopdistill_assets.training.data_assets import TRAINING_DATA_ASSETS, TRAINING_DATA_CHECKS
from shopdistill_assets.training.launch import launcher_from_env


def _with_automation(spec: AssetSpec) -> AssetSpec:
    condition = CONDITIONS.get(spec.key.to_user_string())
    return spec.replace_attributes(automation_condition=condition()) if condition else spec


# The table of contents of the pipeline, in flow order.
ASSETS = [
    a.map_asset_specs(_with_automation)
    for a in (oro_api_day, raw_firehose, *CORPUS_ASSETS, *SPLIT_ASSETS, *FUNNEL_ASSETS, *TRAINING_DATA_ASSETS,
              *TRAINING_ASSETS, *EVAL_ASSETS)
]
ASSET_CHECKS: list = [*CORPUS_CHECKS, *SPLIT_CHECKS, *TRAINING_DATA_CHECKS, *EVAL_CHECKS]
JOBS = [corpus_daily_job, oro_api_daily_job, *TRAINING_JOBS]
SCHEDULES = [corpus_daily_schedule]
# Declared here, not left to Dagster: the one it adds by itself is created stopped (1.13), and then
# nothing follows the corpus. Same name, so the UI and docs keep calling it what Dagster calls it.
default_automation_condition_sensor = AutomationConditionSensorDefinition(
    "default_automation_condition_sensor", target=AssetSelection.all(), default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="The split and the snapshots follow the corpus (jobs/automation.py).")
SENSORS = [firehose_day_sensor, oro_api_day_sensor, *TRAINING_SENSORS, default_automation_condition_sensor]


def _endpoint():
    # An unset endpoint means AWS itself: an EnvVar of an unset variable would fail to resolve.
    return EnvVar(settings.S3_ENDPOINT_URL) if os.environ.get(settings.S3_ENDPOINT_URL) else None


def build_resources(
    firehose_root: str | None = None,
    lake_root: str | None = None,
    endpoint_url: str | None = None,
) -> dict:
    """Resources reading SHOPDISTILL_FIREHOSE / _LAKE / _S3_ENDPOINT_URL. Given roots are written
    into this process's environment first (what the CLI's --firehose/--lake do), so a run here
    and a run launched by the UI with the same variables read the same places."""
    settings.export_roots(firehose_root, lake_root, endpoint_url)
    return {
        "firehose": FirehoseResource(root=EnvVar(settings.FIREHOSE), endpoint_url=_endpoint()),
        "lake": LakeResource(root=EnvVar(settings.LAKE), endpoint_url=_endpoint()),
        "checkpoints": CheckpointStoreResource(root=EnvVar(settings.CHECKPOINTS), endpoint_url=_endpoint(),
                                               base_model=EnvVar(settings.BASE_MODEL)),
        "launcher": launcher_from_env(),  # a GPU pod when SHOPDISTILL_GPU_POD_SPEC is set, else local
        "oro_api": oro_api_resource(),
    }


ORO_API_URL, ORO_API_KEY, ORO_LANDING = "SHOPDISTILL_ORO_API_URL", "SHOPDISTILL_ORO_API_KEY", "SHOPDISTILL_ORO_LANDING"


def oro_api_resource() -> OroApiResource:
    """ORO's API from the environment; a variable left unset keeps the resource's default
    (an EnvVar of an unset variable would fail to resolve)."""
    given = {field: EnvVar(var) for field, var in
             (("base_url", ORO_API_URL), ("api_key", ORO_API_KEY), ("landing_root", ORO_LANDING))
             if os.environ.get(var)}
    return OroApiResource(**given)


def build_definitions(
    firehose_root: str | None = None,
    lake_root: str | None = None,
    endpoint_url: str | None = None,
) -> Definitions:
    """Definitions over the given roots; arguments left None come from the environment."""
    return Definitions(
        assets=ASSETS,
        asset_checks=ASSET_CHECKS,
        resources=build_resources(firehose_root, lake_root, endpoint_url),
        jobs=JOBS,
        schedules=SCHEDULES,
        sensors=SENSORS,
        # One process per run: the heavy stages fan out to their own process pool, so a
        # subprocess per step would only add an interpreter start (seconds) to every step.
        executor=in_process_executor,
    )


defs = build_definitions()
