"""The code location: every asset, check, job and schedule, with resources from the environment.

Environment (all optional):
  SHOPDISTILL_HOME             project home, default `.shopdistill` relative to the working
                               directory (workspace.yaml pins that to the repo root)
  SHOPDISTILL_FIREHOSE         firehose root (folder or s3://bucket/prefix),
                               default `$SHOPDISTILL_HOME/arena/firehose` (the simulator's)
  SHOPDISTILL_LAKE             lake root (folder or s3://…), default `$SHOPDISTILL_HOME/lake`
  SHOPDISTILL_S3_ENDPOINT_URL  S3-compatible endpoint for both, e.g. a MinIO or moto server
AWS credentials and region come from boto3's usual chain (AWS_* variables, profile, role).
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import Definitions

from jobs.schedules import corpus_daily_job, corpus_daily_schedule
from jobs.training import TRAINING_JOBS, TRAINING_SENSORS
from resources.checkpoints import CheckpointStoreResource
from resources.firehose import FirehoseResource
from resources.lake import LakeResource
from resources.launcher import TrainingLauncher
from shopdistill_assets.corpus import CORPUS_ASSETS, CORPUS_CHECKS
from shopdistill_assets.evaluation import EVAL_ASSETS, EVAL_CHECKS
from shopdistill_assets.ingest import raw_firehose
from shopdistill_assets.split import SPLIT_ASSETS, SPLIT_CHECKS
from shopdistill_assets.training import TRAINING_ASSETS
from shopdistill_assets.training_data import TRAINING_DATA_ASSETS, TRAINING_DATA_CHECKS

# The table of contents of the pipeline, in flow order.
ASSETS = [
    raw_firehose,
    *CORPUS_ASSETS,
    *SPLIT_ASSETS,
    *TRAINING_DATA_ASSETS,
    *TRAINING_ASSETS,
    *EVAL_ASSETS,
]
ASSET_CHECKS: list = [*CORPUS_CHECKS, *SPLIT_CHECKS, *TRAINING_DATA_CHECKS, *EVAL_CHECKS]
JOBS = [corpus_daily_job, *TRAINING_JOBS]
SCHEDULES = [corpus_daily_schedule]
SENSORS = [*TRAINING_SENSORS]


def shopdistill_home() -> Path:
    return Path(os.environ.get("SHOPDISTILL_HOME") or ".shopdistill")


def build_resources(
    firehose_root: str | None = None,
    lake_root: str | None = None,
    endpoint_url: str | None = None,
) -> dict:
    """Resources over the given roots; arguments left None come from the environment."""
    home = shopdistill_home()
    firehose_root = (
        firehose_root or os.environ.get("SHOPDISTILL_FIREHOSE") or str(home / "arena" / "firehose")
    )
    lake_root = lake_root or os.environ.get("SHOPDISTILL_LAKE") or str(home / "lake")
    endpoint_url = endpoint_url or os.environ.get("SHOPDISTILL_S3_ENDPOINT_URL") or None
    checkpoints_root = os.environ.get("SHOPDISTILL_CHECKPOINTS") or str(home / "checkpoints")
    return {
        "firehose": FirehoseResource(root=firehose_root, endpoint_url=endpoint_url),
        "lake": LakeResource(root=lake_root, endpoint_url=endpoint_url),
        "checkpoints": CheckpointStoreResource(root=checkpoints_root, endpoint_url=endpoint_url,
                                               base_model=os.environ.get("SHOPDISTILL_BASE_MODEL") or "tiny-qwen3"),
        "launcher": TrainingLauncher(deepspeed_config=os.environ.get("SHOPDISTILL_DEEPSPEED") or "zero2"),
    }


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
    )


defs = build_definitions()
