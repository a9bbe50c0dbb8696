"""`shopdistill corpus` killed (SIGKILL, whole process group) at random points of a day's run,
with a reader process hammering the lake: readers never see a table of the day missing or
mixed, the killed runs are marked failed, and a rerun gives bytes identical to an
uninterrupted run with nothing left behind. benchmarks/lake_crash.py is the heavier version.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import lake_stress

from resources.lake import LakeResource
from shopdistill_assets.cli.commands import main as cli

DAY = "2026-11-05"
KILLS = 3


def simulate(out: Path, seed: int) -> Path:
    assert cli(["simulate", "--out", str(out), "--start-day", DAY, "--days", "1",
                "--traces-per-day", "120", "--seed", str(seed)]) == 0
    return out / "firehose"


def test_killed_corpus_runs_leave_no_mixed_or_missing_day_and_a_rerun_is_identical(tmp_path, monkeypatch, capsys):
    inputs = {"a": simulate(tmp_path / "arena-a", 1), "b": simulate(tmp_path / "arena-b", 2)}
    capsys.readouterr()
    baselines = {k: lake_stress.start_corpus(f, tmp_path / f"lake-{k}", DAY, tmp_path / f"home-{k}")
                 for k, f in inputs.items()}
    for proc in baselines.values():
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()[-3000:]
    run_s = run_seconds(tmp_path / "home-a", monkeypatch)
    expected = lake_stress.corpus_tables(tmp_path / "lake-a", DAY)
    assert lake_stress.corpus_tables(tmp_path / "lake-b", DAY) != expected, "the two inputs must differ"

    lake = tmp_path / "lake"
    shutil.copytree(tmp_path / "lake-a", lake, symlinks=True)  # day A is complete before the kills
    home = tmp_path / "home"
    stop, out = tmp_path / "stop", tmp_path / "reads.json"
    reader = subprocess.Popen(
        [sys.executable, str(Path(lake_stress.__file__)), "tables", str(lake), "--day", DAY,
         "--expect", str(tmp_path / "lake-a"), "--expect", str(tmp_path / "lake-b"),
         "--seconds", "600", "--stop", str(stop), "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert reader.stdout.readline() == b"ready\n"

    rng = random.Random(5)
    instance = open_instance(home, monkeypatch)
    killed, attempts = [], 0
    while sum(k is not None for k in killed) < KILLS and attempts < 3 * KILLS:
        firehose = inputs["b" if attempts % 2 == 0 else "a"]  # inputs B, A, B: a killed rerun must not mix them
        # A run takes ~1-2 s and is seen started a little late; a kill that lands after the run has
        # already succeeded kills no run (None) and another attempt is made.
        killed.append(lake_stress.kill_at_random(firehose, lake, DAY, home, rng.uniform(0.05, 0.6) * run_s,
                                                  instance))
        attempts += 1
    rerun = lake_stress.start_corpus(inputs["a"], lake, DAY, home)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err.decode()[-3000:]
    stop.touch()
    _, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err.decode()[-3000:]
    tally = json.loads(out.read_text())

    print(f"\ncrash test: {sum(k is not None for k in killed)} runs killed in {attempts} attempts (a run takes ~{run_s:.1f} s); "
          f"reader: {tally['reads']} table reads of {tally['tables']} tables, {len(tally['bad'])} mixed, "
          f"{tally['missing']} missing")
    assert sum(k is not None for k in killed) >= 2
    assert tally["tables"] >= 10 and tally["reads"] >= 10 * tally["tables"]
    assert tally["bad"] == [] and tally["missing"] == 0 and tally["errors"] == [], tally
    assert list((lake / ".staging").iterdir()) == [], "the rerun cleans the killed runs' scratch at its start"
    assert lake_stress.corpus_tables(lake, DAY) == expected, "a rerun after kills is byte-identical"
    statuses = {r.dagster_run.run_id: r.dagster_run.status for r in instance.get_run_records()}
    assert dg.DagsterRunStatus.STARTED not in statuses.values(), "killed runs do not stay STARTED"
    assert {statuses[k] for k in killed if k} == {dg.DagsterRunStatus.FAILURE}, "every killed run is marked failed"
    LakeResource(root=str(lake)).clean_stale(grace_s=0)  # versions retired within the grace period
    assert lake_stress.leftovers(lake) == []


def open_instance(home: Path, monkeypatch) -> dg.DagsterInstance:
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))  # restored after the test
    return lake_stress.home_instance(home)


def run_seconds(home: Path, monkeypatch) -> float:
    """How long the uninterrupted run took, from its start to its end."""
    (record,) = open_instance(home, monkeypatch).get_run_records()
    return record.end_time - record.start_time
