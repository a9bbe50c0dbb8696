"""The package's shape: a folder per part of the flow, and imports that run one way.

Each part may import only the parts below it (LAYERS, bottom first); `resources/` imports nothing
of `shopdistill_assets`; the names users call (`shopdistill_assets.cli:main`, the Dagster module)
stay where `pyproject.toml` and `workspace.yaml` point.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "shopdistill_assets"
# Bottom first. Top-level modules: settings/partitions/instance/run_monitoring are the platform
# under every part; definitions and cli sit on top of all of them.
LAYERS = [
    {"core", "settings", "partitions", "run_monitoring", "instance", "sandbox"},
    {"ingest"},
    {"corpus"},
    {"split"},
    {"agent"},
    {"sim", "training"},
    {"evaluation"},
    {"definitions"},
    {"cli"},
]
PARTS = {"ingest", "corpus", "split", "agent", "training", "evaluation", "sandbox", "sim", "cli", "core"}


def _level(part: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if part in layer)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _part(path: Path) -> str:
    rel = path.relative_to(PACKAGE).parts
    return rel[0] if len(rel) > 1 else path.stem


def test_every_part_is_a_folder_with_its_assets():
    for part in ("ingest", "corpus", "split", "training", "evaluation"):
        assert (PACKAGE / part / "assets.py").is_file(), part
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert top == {"definitions", "settings", "partitions", "instance", "run_monitoring"}, top
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"} == PARTS


def test_imports_run_one_way():
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        mine = _part(path)
        for name in _imports(path):
            if not name.startswith("shopdistill_assets."):
                continue
            other = name.split(".")[1]
            if other != mine and _level(other) > _level(mine):
                wrong.append(f"{path.relative_to(ROOT)} ({mine}) imports {name} ({other})")
    assert not wrong, "\n".join(wrong)


def test_resources_import_nothing_of_the_package():
    wrong = [f"{p.relative_to(ROOT)}: {n}" for p in (ROOT / "resources").glob("*.py") for n in _imports(p)
             if n.split(".")[0] == "shopdistill_assets"]
    assert not wrong, wrong


def test_the_names_users_call_still_resolve():
    assert callable(importlib.import_module("shopdistill_assets.cli").main)  # [project.scripts]
    assert importlib.import_module("shopdistill_assets.definitions").defs is not None  # workspace.yaml
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'shopdistill = "shopdistill_assets.cli:main"' in pyproject
    assert "module_name: shopdistill_assets.definitions" in (ROOT / "workspace.yaml").read_text()
