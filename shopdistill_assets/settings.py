"""Where things are: the one place that turns environment variables into roots.

Every process of a deployment (the CLI, `dagster dev`'s code server, run workers launched by the
schedule, the sensors or a backfill) reads these variables the same way, so a day the CLI wrote
is the day the UI reads. No Dagster imports here: the CLI checks its arguments without loading
Dagster.

| variable | default |
|---|---|
| SHOPDISTILL_HOME            | `.shopdistill` in the working directory, made absolute |
| SHOPDISTILL_FIREHOSE        | `$SHOPDISTILL_HOME/arena/firehose` (the simulator's) |
| SHOPDISTILL_LAKE            | `$SHOPDISTILL_HOME/lake` |
| SHOPDISTILL_S3_ENDPOINT_URL | unset: AWS S3 (set it for MinIO, moto, ...) |
| SHOPDISTILL_START_DATE      | `2026-11-01`, the first daily partition |
| SHOPDISTILL_SUITES          | `$SHOPDISTILL_HOME/arena/suites` (ground truth for heldout_eval_set) |
| SHOPDISTILL_DECONTAMINATE   | unset: public test sets (paths joined by `:`) excluded from training |
| SHOPDISTILL_CHECKPOINTS     | `$SHOPDISTILL_HOME/checkpoints` (folder or s3://…): the checkpoint store |
| SHOPDISTILL_BASE_MODEL      | `tiny-qwen3` (built offline); a Hugging Face id or folder, e.g. Qwen/Qwen3-4B |
| SHOPDISTILL_DEEPSPEED       | `zero2`; `zero3` or a ZeRO JSON file |
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

HOME = "SHOPDISTILL_HOME"
FIREHOSE = "SHOPDISTILL_FIREHOSE"
LAKE = "SHOPDISTILL_LAKE"
S3_ENDPOINT_URL = "SHOPDISTILL_S3_ENDPOINT_URL"
START_DATE = "SHOPDISTILL_START_DATE"
SUITES = "SHOPDISTILL_SUITES"
DECONTAMINATE = "SHOPDISTILL_DECONTAMINATE"
CHECKPOINTS = "SHOPDISTILL_CHECKPOINTS"
BASE_MODEL = "SHOPDISTILL_BASE_MODEL"
DEEPSPEED = "SHOPDISTILL_DEEPSPEED"
DEFAULT_BASE_MODEL = "tiny-qwen3"
DEFAULT_DEEPSPEED = "zero2"

DEFAULT_START_DATE = "2026-11-01"


@dataclass(frozen=True)
class Roots:
    home: str
    firehose: str
    lake: str
    endpoint_url: str | None
    checkpoints: str = ""
    base_model: str = DEFAULT_BASE_MODEL
    deepspeed: str = DEFAULT_DEEPSPEED


def home_path(environ=None) -> Path:
    """The one home rule: `SHOPDISTILL_HOME`, default `.shopdistill` in the working directory, absolute."""
    environ = os.environ if environ is None else environ
    return Path(environ.get(HOME) or ".shopdistill").resolve()


def _home(environ) -> str:
    return str(home_path(environ))


def path_list(name: str, environ=None) -> list[str]:
    """A variable holding paths joined by the OS separator (`:`), empty parts dropped."""
    environ = os.environ if environ is None else environ
    return [p for p in environ.get(name, "").split(os.pathsep) if p]


def resolve_roots(environ=None) -> Roots:
    """The roots the variables name (defaults filled in), without changing anything."""
    environ = os.environ if environ is None else environ
    home = _home(environ)
    return Roots(
        home=home,
        firehose=environ.get(FIREHOSE) or str(Path(home) / "arena" / "firehose"),
        lake=environ.get(LAKE) or str(Path(home) / "lake"),
        endpoint_url=environ.get(S3_ENDPOINT_URL) or None,
        checkpoints=environ.get(CHECKPOINTS) or str(Path(home) / "checkpoints"),
        base_model=environ.get(BASE_MODEL) or DEFAULT_BASE_MODEL,
        deepspeed=environ.get(DEEPSPEED) or DEFAULT_DEEPSPEED,
    )


def export_roots(firehose: str | None = None, lake: str | None = None,
                 endpoint_url: str | None = None) -> Roots:
    """Write the roots into this process's environment (given values win, then the variables
    already set, then the defaults), so resources built on `EnvVar`, and any process started
    from here, read exactly these. Local roots are made absolute: a run worker may start
    elsewhere."""
    given = {FIREHOSE: firehose, LAKE: lake, S3_ENDPOINT_URL: endpoint_url}
    for name, value in given.items():
        if value:
            os.environ[name] = value
    os.environ[HOME] = _home(os.environ)
    roots = resolve_roots()
    os.environ[FIREHOSE] = _absolute(roots.firehose)
    os.environ[LAKE] = _absolute(roots.lake)
    os.environ[CHECKPOINTS] = _absolute(roots.checkpoints)
    os.environ[BASE_MODEL] = roots.base_model
    os.environ[DEEPSPEED] = roots.deepspeed
    return resolve_roots()


def _absolute(root: str) -> str:
    return root if root.startswith("s3://") else str(Path(root).resolve())


def start_date(environ=None) -> str:
    """SHOPDISTILL_START_DATE, checked: a bad value is named as the variable, not as a --day."""
    from shopdistill_assets.core.days import DayError, parse_day

    environ = os.environ if environ is None else environ
    text = environ.get(START_DATE) or DEFAULT_START_DATE
    try:
        parse_day(text)
    except DayError as exc:
        raise DayError(f"{START_DATE}={text!r} is not a valid first day: {exc}; set it to a date such as "
                       f"{DEFAULT_START_DATE}") from None
    return text


def describe(roots: Roots) -> str:
    """`export` lines a shell (or an .env file) can take back."""
    lines = [f"export {HOME}={roots.home}", f"export {FIREHOSE}={roots.firehose}", f"export {LAKE}={roots.lake}",
             f"export {CHECKPOINTS}={roots.checkpoints}", f"export {BASE_MODEL}={roots.base_model}",
             f"export {DEEPSPEED}={roots.deepspeed}"]
    if roots.endpoint_url:
        lines.append(f"export {S3_ENDPOINT_URL}={roots.endpoint_url}")
    lines.append(f"export {START_DATE}={start_date()}")
    return "\n".join(lines)
