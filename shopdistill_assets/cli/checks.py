"""What the command line checks before it starts any work.

A mistake on the command line (a wrong root, a day that has no folder, a model the server does
not serve, a malformed JSON option) is one clear line before anything runs: no Dagster run is
launched, so no real day turns red in the UI, and nothing is written half-way.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


class CheckFailed(Exception):
    """A precondition of a command does not hold; the message says what and how to fix it."""


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (`--days 0` would do nothing and exit 0)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def json_object(text: str) -> str:
    """argparse type: JSON text of an object, checked here rather than inside a launched run."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc}): {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object ({{...}}), not {type(value).__name__}: {text[:80]!r}")
    return text


def firehose_days(root: str, endpoint_url: str | None, days: list[str]) -> None:
    """The firehose root exists and every day has files, or nothing is run."""
    from jobs.firehose_days import day_has_files
    from resources.firehose import FirehoseResource
    from resources.s3 import is_s3_uri

    if not is_s3_uri(root) and not Path(root).is_dir():
        raise CheckFailed(f"the firehose root {root} is not a folder: pass --firehose DIR or s3://bucket/prefix, "
                          f"or set SHOPDISTILL_FIREHOSE (`shopdistill env` prints the roots); nothing was run")
    firehose = FirehoseResource(root=root, endpoint_url=endpoint_url)
    missing = [day for day in days if not day_has_files(firehose, day)]
    if missing:
        raise CheckFailed(f"no firehose files for day {', '.join(missing)} under {root} (expected "
                          f"day=YYYY-MM-DD/*.jsonl, *.jsonl.gz or *.jsonl.zst); nothing was run")


def checkpoint_folder(path: str) -> None:
    """A local checkpoint must be a transformers folder now, not an error at evaluation time."""
    if path.startswith("s3://"):
        return  # resolved by the checkpoint store when the policy is served
    if not (Path(path) / "config.json").is_file():
        raise CheckFailed(f"no checkpoint at {path}: expected a transformers folder with config.json "
                          f"(e.g. HOME/checkpoints/<stage>/<version>)")


def _models_reply(url: str, timeout_s: float) -> bytes | None:
    """GET url within timeout_s in all (a dripping server cannot hold it), at most 1 MiB; None
    when the reply is not a plain 200."""
    import time

    import httpx

    deadline = time.monotonic() + timeout_s
    with httpx.stream("GET", url, timeout=timeout_s) as reply:
        if reply.status_code != 200:
            return None
        body = bytearray()
        for chunk in reply.iter_bytes():
            body += chunk
            if time.monotonic() > deadline or len(body) > 1 << 20:
                return None
        return bytes(body)


def served_model(endpoint: str, model: str, timeout_s: float = 10.0) -> None:
    """The endpoint answers and serves `model` (OpenAI's GET /models). Only two answers stop the
    command: nothing listens there, or a model list without this model. Anything else (no such
    route, an odd or slow reply) is left to the evaluation, which reports per episode."""
    import httpx

    url = endpoint.rstrip("/") + "/models"
    try:
        raw = _models_reply(url, timeout_s)
    except httpx.ConnectError as exc:
        raise CheckFailed(f"no server answers at {endpoint} ({type(exc).__name__}: {exc}); is it up? "
                          f"(`shopdistill serve ...`)") from None
    except httpx.HTTPError:
        return
    try:
        listed = json.loads(raw)["data"] if raw is not None else None
        served = [m["id"] for m in listed if isinstance(m, dict) and isinstance(m.get("id"), str)]
    except (ValueError, KeyError, TypeError):
        return
    if model not in served:
        raise CheckFailed(f"the endpoint {endpoint} does not serve model {model!r} "
                          f"(it serves: {', '.join(served) or 'none'}); pass --model with one of those")


def snapshot_inputs(lake, end_day: str | None, window_days: int, suites: list[str]) -> None:
    """Both snapshots' inputs exist, so neither is written when the other would fail."""
    from shopdistill_assets.instance import project_home
    from shopdistill_assets.split.heldout import load_problems

    split_days, leak_days = lake.list_days("split_traces"), lake.list_days("leak_clusters")
    if not split_days:
        raise CheckFailed(f"no split_traces day in the lake {lake.root}: run `shopdistill corpus --day YYYY-MM-DD` first")
    if window_days < 1:
        raise CheckFailed(f"--window-days {window_days}: a train window holds at least 1 day")
    if end_day is not None and (end_day not in split_days or end_day not in leak_days):
        raise CheckFailed(f"--end-day {end_day} has no split_traces or leak_clusters in the lake {lake.root} "
                          f"(split days: {split_days[0]} .. {split_days[-1]})")
    for path in suites or [str(project_home() / "arena" / "suites")]:
        try:
            if not load_problems(Path(path)):
                raise CheckFailed(f"the suite {path} holds no problems")
        except (FileNotFoundError, ValueError, KeyError) as exc:
            raise CheckFailed(f"heldout_eval_set needs suites with ground truth: {exc} (pass --suites PATH or set "
                              f"SHOPDISTILL_SUITES); no snapshot was written") from None
