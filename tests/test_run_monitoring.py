"""A run whose process is killed does not stay STARTED: the daemon's run monitoring (through
PidMonitoredRunLauncher) and the CLI's start-up sweep both mark it failed; live runs are left alone."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
from dagster._core.launcher import WorkerStatus
from dagster._daemon.monitoring.run_monitoring import monitor_started_run

from shopdistill_assets.instance import project_instance
from shopdistill_assets.run_monitoring import PidMonitoredRunLauncher

REPO = Path(__file__).resolve().parents[1]
SLEEPER = """
import sys, time
import dagster as dg
from shopdistill_assets.instance import project_instance

@dg.asset
def slow_asset():
    open(sys.argv[1], "w").write("started")
    time.sleep(600)

dg.materialize([slow_asset], instance=project_instance())
"""


def start_sleeper(home: Path, flag: Path) -> subprocess.Popen:
    env = {**os.environ, "SHOPDISTILL_HOME": str(home), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER, str(flag)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not flag.exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "the sleeping run never started"
        time.sleep(0.1)
    return proc


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.communicate()


def started_runs(instance: dg.DagsterInstance) -> list[dg.RunRecord]:
    return list(instance.get_run_records(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])))


def test_killed_runs_are_marked_failed_and_live_ones_are_not(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("SHOPDISTILL_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))  # restored after: project_instance sets it
    first, second = start_sleeper(home, tmp_path / "a"), start_sleeper(home, tmp_path / "b")
    instance = project_instance(home)
    assert isinstance(instance.run_launcher, PidMonitoredRunLauncher) and instance.run_monitoring_enabled
    assert len(started_runs(instance)) == 2, "live runs are left alone"
    for record in started_runs(instance):
        assert instance.run_launcher.check_run_worker_health(record.dagster_run).status == WorkerStatus.RUNNING

    kill(first)
    (record,) = [r for r in started_runs(instance) if r.dagster_run.run_id != _run_of(instance, second)]
    # What the daemon's run monitoring does on its next poll:
    monitor_started_run(instance, None, record, logging.getLogger("test"))
    assert instance.get_run_by_id(record.dagster_run.run_id).status == dg.DagsterRunStatus.FAILURE
    assert len(started_runs(instance)) == 1

    kill(second)
    assert len(started_runs(instance)) == 1, "nothing notices without the daemon..."
    instance = project_instance(home)  # ...until the next CLI command starts
    assert started_runs(instance) == []
    statuses = [r.dagster_run.status for r in instance.get_run_records()]
    assert statuses == [dg.DagsterRunStatus.FAILURE] * 2


def _run_of(instance: dg.DagsterInstance, proc: subprocess.Popen) -> str:
    from shopdistill_assets.run_monitoring import run_pids

    (run_id,) = [r.dagster_run.run_id for r in started_runs(instance)
                 if any(pid == proc.pid for pid, _ in run_pids(instance, r.dagster_run.run_id))]
    return run_id
