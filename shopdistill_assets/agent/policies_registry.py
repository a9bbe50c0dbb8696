"""Policies an evaluation can be run for: a name -> how to reach it.

A policy is an OpenAI-compatible endpoint (`endpoint` + `model`), a local checkpoint folder
(`checkpoint`, served in-process through the same HTTP path), or a scripted baseline
(`scripted`: oracle | random | fair). Entries live as JSON files under `HOME/policies/`, so the CLI,
the UI and training stages can add one; the Dagster dynamic partition of the same name is
added beside it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from dagster import DynamicPartitionsDefinition

from shopdistill_assets.instance import project_home

_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")
SCRIPTED = ("oracle", "random", "fair")  # fair: decides from tool results alone (agent/fair.py)
# One partition per registered policy: the eval asset's partitions, added beside each entry.
policy_partitions = DynamicPartitionsDefinition(name="policies")


@dataclass(frozen=True)
class PolicySpec:
    name: str
    endpoint: str | None = None
    model: str | None = None
    checkpoint: str | None = None
    scripted: str | None = None

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"policy name {self.name!r}: letters, digits, _ . - only")
        if sum(x is not None for x in (self.endpoint, self.checkpoint, self.scripted)) != 1:
            raise ValueError("a policy is exactly one of: endpoint (+ model), checkpoint, scripted")
        if self.scripted not in (None, *SCRIPTED):
            raise ValueError(f"unknown scripted policy {self.scripted!r} ({' | '.join(SCRIPTED)})")


def registry_dir(home: Path | None = None) -> Path:
    folder = (home or project_home()) / "policies"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class PolicyExists(FileExistsError):
    """A policy of that name is registered already and the caller did not ask to replace it."""


def register(spec: PolicySpec, home: Path | None = None, replace: bool = True) -> Path:
    """Write the entry. Stages and the demo re-register their own names (replace=True); the CLI
    refuses to overwrite a name unless told to (`policy add --replace`)."""
    path = registry_dir(home) / f"{spec.name}.json"
    if path.exists() and not replace:
        current = {k: v for k, v in json.loads(path.read_text()).items() if v is not None and k != "name"}
        raise PolicyExists(f"policy {spec.name!r} is already registered as {json.dumps(current, sort_keys=True)} "
                           f"({path}); pass --replace to overwrite it")
    path.write_text(json.dumps(asdict(spec), indent=1, sort_keys=True) + "\n")
    return path


def lookup(name: str, home: Path | None = None) -> PolicySpec:
    path = registry_dir(home) / f"{name}.json"
    if not _NAME.match(name) or not path.exists():
        raise KeyError(f"no policy {name!r} registered under {registry_dir(home)} (add it: `shopdistill policy add {name} --endpoint URL --model M | --checkpoint PATH | --scripted oracle|random`)")
    return PolicySpec(**json.loads(path.read_text()))


def registered(home: Path | None = None) -> list[PolicySpec]:
    return [PolicySpec(**json.loads(p.read_text())) for p in sorted(registry_dir(home).glob("*.json"))]
