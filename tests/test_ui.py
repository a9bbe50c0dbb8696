"""What a Dagster user sees: runs launched the way the UI and daemon launch them read the roots
the CLI used, and the per-day funnel is visible in the UI (`dagster dev` driven by headless
Chromium)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg
import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / ".test-artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def clean_env(home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPDISTILL_") and k != "DAGSTER_HOME"}
    return {**env, "SHOPDISTILL_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), **extra}


def live_in_group(pgid: int) -> list[int]:
    """The processes of process group `pgid` that have not exited (zombies left out: an orphan's
    zombie may never be reaped in a container)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command, which may hold spaces
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            live.append(int(stat.parent.name))
    return live


def stop_session(proc: subprocess.Popen, whole_group: bool = False, grace_s: float = 120) -> None:
    """Stop a service started in its own session: SIGTERM to its leader (`dagster dev` then shuts down
    the webserver, daemon and code servers it started, as on Ctrl-C), or to the whole group where the
    leader does not pass it on (`make`); then wait until every process of the group has exited: a
    code server's multiprocessing resource tracker unlinks its `/dev/shm` semaphores only when it
    outlives its parent, so SIGKILL, which leaks them, comes only after `grace_s`."""
    (os.killpg if whole_group else os.kill)(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while proc.poll() is None or live_in_group(proc.pid):
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return
        time.sleep(0.5)


def funnel_materialization(home: Path):
    os.environ["DAGSTER_HOME"] = str(home / "dagster")  # the instance's yaml names it; restored after the test
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("corpus_funnel"))
        return {k: getattr(v, "value", v) for k, v in event.asset_materialization.metadata.items()}


@pytest.fixture(scope="module")
def processed(tmp_path_factory) -> tuple[Path, str]:
    """A day processed by `shopdistill corpus` on the default roots (only SHOPDISTILL_HOME set),
    then the funnel materialized by `dagster asset materialize` from another working directory,
    the way the UI and daemon launch runs: through the code location and the instance."""
    from tests.conftest import TINY_DAY, sample_lines

    home = tmp_path_factory.mktemp("home")
    day_dir = home / "arena" / "firehose" / f"day={TINY_DAY}"
    day_dir.mkdir(parents=True)
    (day_dir / "part-000.jsonl").write_bytes(b"".join(sample_lines()))
    env = clean_env(home)
    cli = subprocess.run([str(BIN / "shopdistill"), "corpus", "--day", TINY_DAY], env=env, cwd=home,
                         capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    ui_run = subprocess.run([str(BIN / "dagster"), "asset", "materialize", "-m", "shopdistill_assets.definitions",
                             "--select", "corpus_funnel"], env=env, cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert ui_run.returncode == 0, ui_run.stdout[-3000:] + ui_run.stderr[-3000:]
    return home, TINY_DAY


def test_runs_launched_like_the_ui_read_the_roots_the_cli_wrote(processed):
    home, day = processed
    meta = funnel_materialization(home)
    # The tiny day has 7 lines; the funnel (read from the lake by a run in another process) sees them all.
    assert meta["days"] == 1 and meta["incomplete_days"] == 0
    assert meta["lines"] == 7 == meta["gated"] + meta["subtask"] + meta["rejected"]
    (row,) = [r.data for r in meta["funnel"].records]  # Dagster's typed table, one row a day
    assert row["day"] == day and row["lines"] == 7 and row["gated"] == meta["gated"]
    assert [c.type for c in meta["funnel"].schema.columns][:3] == ["string", "int", "int"]
    reasons = [r.data for r in meta["reasons_by_day"].records]  # long: (day, stage, reason, lines)
    assert {r["day"] for r in reasons} == {day} and sum(r["lines"] for r in reasons) == meta["rejected"]
    assert (home / "lake" / "corpus_funnel").is_dir()


def test_cli_runs_are_tagged_with_their_command(processed):
    home, _ = processed
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        runs = instance.get_runs()
        cli_runs = [r for r in runs if r.tags.get("shopdistill/trigger") == "cli"]
        assert cli_runs and {r.tags["shopdistill/command"] for r in cli_runs} == {"corpus"}
        # the run's log in the UI says how fast each step went
        (throughput,) = [e.dagster_event.message for e in instance.all_logs(cli_runs[0].run_id)
                         if e.dagster_event and (e.dagster_event.message or "").startswith("throughput: ")]
    assert "corpus: " in throughput and "7 rows" in throughput and "rows/s" in throughput, throughput
    assert all(r.tags.get("shopdistill/command") for r in runs if r.job_name == "__ephemeral_asset_job__"
               and r.tags.get("dagster/partition"))  # every CLI day run says which command made it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def dagster_dev(processed, tmp_path):
    home, _ = processed
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium (.ci/run does)")
        pytest.skip("/usr/bin/chromium is not installed (apt-get install chromium)")
    port = _free_port()
    # An empty firehose: the sensor finds nothing to run while the page is read.
    env = clean_env(home, SHOPDISTILL_FIREHOSE=str(tmp_path / "empty-firehose"))
    log = open(tmp_path / "dagster-dev.log", "wb")
    proc = subprocess.Popen([str(BIN / "dagster"), "dev", "-m", "shopdistill_assets.definitions", "-h", "127.0.0.1",
                             "-p", str(port)], env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"{url}/server_info", timeout=2)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "dagster-dev.log").read_text()[-3000:]
                time.sleep(1)
        yield url
    finally:
        stop_session(proc)
        log.close()


def dismiss_newsletter_prompt(page, wait_s: float) -> None:
    """The UI's first-visit "Join the Dagster community" dialog: it opens a few seconds after the
    page, later under load, and covers everything until skipped."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    skip = page.get_by_role("button", name="Skip")
    try:
        skip.first.wait_for(state="visible", timeout=max(wait_s, 0.1) * 1000)
    except PlaywrightTimeout:
        return
    skip.first.click()
    skip.first.wait_for(state="hidden", timeout=10_000)


def test_the_funnel_is_visible_in_the_ui(dagster_dev, processed, tmp_path):
    from playwright.sync_api import sync_playwright

    home, day = processed
    meta = funnel_materialization(home)
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS[1:])
        context = browser.new_context(viewport={"width": 1400, "height": 1400})
        page = context.new_page()
        try:
            page.goto(f"{dagster_dev}/assets/corpus_funnel", wait_until="networkidle", timeout=120_000)
            dismiss_newsletter_prompt(page, wait_s=10)
            row = page.get_by_role("row").filter(has_text=day)
            row.first.wait_for(timeout=60_000)
            # The funnel table's own row: the one that starts with the day (outer rows hold it whole).
            (cells,) = [t for t in (r.inner_text().split() for r in page.get_by_role("row").all())
                        if t and t[0] == day and len(t) > 8]
            (expected,) = [r.data for r in meta["funnel"].records]
            assert cells == [str(expected[c.name]) for c in meta["funnel"].schema.columns], (cells, expected)
            assert cells[1] == "7" and int(cells[5]) == meta["gated"] and int(cells[6]) == meta["rejected"]
            body = page.inner_text("body")
            for key in ("lines", "gated", "subtask", "rejected"):
                assert key in body
            dismiss_newsletter_prompt(page, wait_s=0)  # it can come late on a loaded machine
            page.screenshot(path=str(ARTIFACTS / "corpus_funnel.png"), full_page=True)
            page.get_by_text("Show Markdown").first.click()  # the plot, in a dialog
            image = page.locator("img[src^='data:image/png;base64,']").first
            image.wait_for(timeout=30_000)
            assert image.evaluate("img => img.naturalWidth") > 100
            page.screenshot(path=str(ARTIFACTS / "corpus_funnel_plot.png"))
        finally:
            browser.close()


@pytest.fixture
def root_dagster_dev(tmp_path):
    """`dagster dev` (or `dg dev`) typed at the repo root by a new user: no DAGSTER_HOME, so
    Dagster makes a temporary instance there and reads the repo-root dagster.yaml."""
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is not installed (make browser)")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHOPDISTILL_", "DAGSTER_"))}
    env.update(SHOPDISTILL_HOME=str(tmp_path / "home"), SHOPDISTILL_FIREHOSE=str(tmp_path / "empty-firehose"))
    log = open(tmp_path / "dagster-dev.log", "wb")
    proc = subprocess.Popen([str(BIN / "dagster"), "dev", "-h", "127.0.0.1", "-p", str(port)], env=env, cwd=REPO,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"{url}/server_info", timeout=2)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "dagster-dev.log").read_text()[-3000:]
                time.sleep(1)
        yield url
    finally:
        stop_session(proc)
        log.close()
    assert "which is not set" not in (tmp_path / "dagster-dev.log").read_text()  # the DAGSTER_HOME traceback


STATUS_QUERY = """{ repositoryOrError(repositorySelector: {repositoryLocationName: "shopdistill",
  repositoryName: "__repository__"}) { ... on Repository { sensors { name sensorState { status } }
  schedules { name scheduleState { status } } } } }"""


def instigator_status(url: str) -> dict[str, str]:
    """What the automation page shows, from the UI's own GraphQL API."""
    import json

    request = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": STATUS_QUERY}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        repository = json.loads(reply.read())["data"]["repositoryOrError"]
    return {**{s["name"]: s["sensorState"]["status"] for s in repository["sensors"]},
            **{s["name"]: s["scheduleState"]["status"] for s in repository["schedules"]}}


def test_dagster_dev_at_the_root_shows_the_graph_and_the_sensors_running(root_dagster_dev):
    from playwright.sync_api import sync_playwright

    assert instigator_status(root_dagster_dev) == {
        "default_automation_condition_sensor": "RUNNING", "firehose_day_sensor": "RUNNING",
        "checkpoint_eval_sensor": "RUNNING", "corpus_daily_schedule": "STOPPED", "oro_api_day_sensor": "STOPPED"}
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS[1:])
        page = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
        try:
            page.goto(f"{root_dagster_dev}/asset-groups", wait_until="networkidle", timeout=120_000)
            dismiss_newsletter_prompt(page, wait_s=10)
            page.get_by_text("training_data").first.wait_for(timeout=60_000)
            page.wait_for_timeout(3000)  # the graph lays itself out
            page.screenshot(path=str(ARTIFACTS / "root_dagster_dev_asset_graph.png"))
            for group in ("corpus", "split"):
                page.goto(f"{root_dagster_dev}/locations/shopdistill/asset-groups/{group}/lineage",
                          wait_until="networkidle", timeout=120_000)
                page.wait_for_timeout(3000)
                page.screenshot(path=str(ARTIFACTS / f"root_dagster_dev_asset_graph_{group}.png"))
            page.goto(f"{root_dagster_dev}/automation", wait_until="networkidle", timeout=120_000)
            dismiss_newsletter_prompt(page, wait_s=3)
            for name in ("default_automation_condition_sensor", "firehose_day_sensor", "checkpoint_eval_sensor",
                         "corpus_daily_schedule"):
                page.get_by_text(name).first.wait_for(timeout=60_000)
            page.wait_for_timeout(2000)
            page.screenshot(path=str(ARTIFACTS / "root_dagster_dev_automation.png"), full_page=True)
        finally:
            browser.close()


def test_a_second_make_dev_fails_clearly_instead_of_a_second_daemon(tmp_path):
    """`make dev` twice on one project home: the second stops with one line, on the same port
    (already in use) or another (the instance has its daemon)."""
    port, other = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHOPDISTILL_", "DAGSTER_"))}
    env.update(SHOPDISTILL_FIREHOSE=str(tmp_path / "empty-firehose"))

    def make_dev(dev_port: int):
        # -o setup: the venv is given (BIN), not built in this checkout
        return [shutil.which("make"), "-s", "-o", "setup", "dev", f"BIN={BIN}", f"DEV_PORT={dev_port}",
                f"SHOPDISTILL_HOME={tmp_path / 'home'}"]

    log = open(tmp_path / "first.log", "wb")
    first = subprocess.Popen(make_dev(port), env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
                break
            except OSError:
                assert first.poll() is None and time.monotonic() < deadline, (tmp_path / "first.log").read_text()[-3000:]
                time.sleep(1)
        same = subprocess.run(make_dev(port), env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert same.returncode != 0 and f"make dev: 127.0.0.1:{port} is already in use" in same.stderr, same.stderr
        moved = subprocess.run(make_dev(other), env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert moved.returncode != 0, moved.stdout[-2000:]
        assert "another make dev already runs on" in moved.stderr, moved.stderr
    finally:
        stop_session(first, whole_group=True)
        log.close()
