"""The project home and its Dagster instance (SQLite under `SHOPDISTILL_HOME/dagster`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from dagster import DagsterInstance

_REPO_DAGSTER_YAML = Path(__file__).resolve().parents[1] / "dagster.yaml"
_FALLBACK_YAML = """storage:
  sqlite:
    base_dir:
      env: DAGSTER_HOME
concurrency:
  pools:
    default_limit: 1
telemetry:
  enabled: false
"""


def project_home() -> Path:
    """`SHOPDISTILL_HOME`, default `.shopdistill` in the working directory; made absolute."""
    home = Path(os.environ.get("SHOPDISTILL_HOME") or ".shopdistill").resolve()
    home.mkdir(parents=True, exist_ok=True)
    return home


def project_instance(home: Path | None = None) -> DagsterInstance:
    """The persistent local instance the UI (`make dev`) shows: runs of the CLI land there too."""
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
    return DagsterInstance.get()
