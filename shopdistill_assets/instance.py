"""The project home and its Dagster instance (SQLite under `SHOPDISTILL_HOME/dagster`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from dagster import DagsterInstance

from shopdistill_assets import settings

_REPO_DAGSTER_YAML = Path(__file__).resolve().parents[1] / "dagster.yaml"
_FALLBACK_YAML = """run_launcher:
  module: shopdistill_assets.run_monitoring
  class: PidMonitoredRunLauncher
run_monitoring:
  enabled: true
  poll_interval_seconds: 30
concurrency:
  pools:
    default_limit: 1
telemetry:
  enabled: false
"""


def project_home() -> Path:
    """`SHOPDISTILL_HOME`, default `.shopdistill` in the working directory; made absolute."""
    home = settings.home_path()
    home.mkdir(parents=True, exist_ok=True)
    return home


def project_instance(home: Path | None = None) -> DagsterInstance:
    """The persistent local instance the UI (`make dev`) shows: runs of the CLI land there too.
    Runs that an earlier, killed process left STARTED are marked failed here, first."""
    home = home or project_home()
    dagster_home = home / "dagster"
    dagster_home.mkdir(parents=True, exist_ok=True)
    config = dagster_home / "dagster.yaml"
    if not config.exists():
        if _REPO_DAGSTER_YAML.exists():
            shutil.copyfile(_REPO_DAGSTER_YAML, config)
        else:
            config.write_text(_FALLBACK_YAML)
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    os.environ.setdefault("SHOPDISTILL_HOME", str(home))
    instance = DagsterInstance.get()
    from shopdistill_assets.run_monitoring import fail_orphaned_runs  # dagster internals: only when needed

    fail_orphaned_runs(instance)
    return instance
