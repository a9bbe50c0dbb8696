"""Runs whose process died stay STARTED unless someone notices: this notices, locally.

Dagster 1.13's run monitoring (dagster.yaml `run_monitoring`, run by the daemon that `dagster
dev` starts) fails dead runs only where the run launcher can check a run worker's health, and
the `DefaultRunLauncher` cannot. Every run records the pid of the process that executes it (the
engine events "Started process for run (pid: N)" / "Executing steps in process (pid: N)"), so:

- `PidMonitoredRunLauncher` is the default launcher plus that health check (the daemon uses it);
- `fail_orphaned_runs` does the same sweep without a daemon: the CLI calls it at start (see
  `instance.project_instance`), so a killed `shopdistill corpus` run is marked failed by the next.

A pid counts as the run's process only if that process already existed when the event was
written: a pid reused by a later process does not keep a dead run alive.
"""

from __future__ import annotations

import psutil
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.events import DagsterEventType
from dagster._core.launcher import CheckRunHealthResult, DefaultRunLauncher, WorkerStatus
from dagster._core.storage.dagster_run import DagsterRun

_CLOCK_SLACK_S = 2.0  # create_time and event timestamps come from different clocks' rounding


def run_pids(instance: DagsterInstance, run_id: str) -> list[tuple[int, float]]:
    """(pid, when it was recorded) for every process the run said it executes in."""
    found = []
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        data = entry.dagster_event.engine_event_data if entry.dagster_event else None
        pid = data.metadata.get("pid") if data and data.metadata else None
        text = str(getattr(pid, "value", pid) or "")
        if text.isdigit():
            found.append((int(text), entry.timestamp))
    return found


def process_alive(pid: int, seen_at: float) -> bool:
    """Whether the process that had `pid` at time `seen_at` still runs."""
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and process.create_time() <= seen_at + _CLOCK_SLACK_S
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # cannot tell: never fail a run on a guess


def run_worker_dead(instance: DagsterInstance, run: DagsterRun) -> bool | None:
    """True when every process the run recorded is gone; None when it recorded none yet."""
    pids = run_pids(instance, run.run_id)
    if not pids:
        return None
    return not any(process_alive(pid, seen_at) for pid, seen_at in pids)


def fail_orphaned_runs(instance: DagsterInstance) -> list[str]:
    """Mark STARTED runs whose processes are all gone as failed; returns their run ids."""
    failed = []
    for record in instance.get_run_records(filters=RunsFilter(statuses=[DagsterRunStatus.STARTED])):
        run = record.dagster_run
        if run_worker_dead(instance, run):
            instance.report_run_failed(run, "the run's process is gone (killed or crashed): marked failed "
                                            "by shopdistill's orphaned-run sweep")
            failed.append(run.run_id)
    return failed


class PidMonitoredRunLauncher(DefaultRunLauncher):
    """The default launcher, with the run-worker health check that run monitoring needs."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        dead = run_worker_dead(self._instance, run)
        if dead:
            return CheckRunHealthResult(WorkerStatus.FAILED, "every process of the run is gone")
        # No pid recorded yet means just launched: anything but RUNNING would fail the run.
        return CheckRunHealthResult(WorkerStatus.RUNNING)
