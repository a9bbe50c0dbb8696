"""Progress of long CLI work: a redrawn bar with rate and ETA on a terminal, plain lines in a log."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

from shopdistill_assets.cli.progress import Progress

CLI = str(Path(sys.executable).with_name("shopdistill"))


def test_a_terminal_gets_one_redrawn_bar_with_rate_and_eta():
    out = io.StringIO()
    with Progress("corpus", total=4, unit="days", stream=out, tty=True) as bar:
        for day in range(4):
            time.sleep(0.05)
            bar.advance(note=f"day {day}")
            if day == 1:
                assert "2/4 days" in out.getvalue().split("\r")[-1] and "ETA" in out.getvalue()
    text = out.getvalue()
    assert text.count("\n") == 1  # one line, redrawn in place, ended once
    last = text.split("\r\x1b[2K")[-1]
    assert last.startswith("corpus  4/4 days  [####################]") and "days/s" in last and "done in" in last


def test_a_log_gets_plain_lines_at_each_step_and_while_a_long_step_runs():
    out = io.StringIO()
    with Progress("train sft", stream=out, tty=False, every_s=0.5):
        time.sleep(2.3)  # one long step of unknown length: still a line every 0.5 s
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) >= 4
    assert lines[0] == "train sft  elapsed 0 s" and lines[-1] == "train sft  done in 2 s"


def test_simulate_reports_each_day_on_stderr_and_keeps_stdout_for_its_json(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPDISTILL_")}
    proc = subprocess.run([CLI, "simulate", "--out", str(tmp_path / "arena"), "--days", "2", "--traces-per-day", "20",
                           "--products", "200"], env={**env, "SHOPDISTILL_HOME": str(tmp_path)}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert any("simulate  1/2 days" in line and "2026-11-01 20 traces" in line for line in lines), lines
    assert lines[-1].startswith("simulate  2/2 days  [####################]") and "done in" in lines[-1]
    assert proc.stdout.lstrip().startswith("{")  # the summary alone on stdout
