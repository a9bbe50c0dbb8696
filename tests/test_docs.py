"""The docs stay true: the reason table in docs/architecture.md is the one in code."""

from pathlib import Path

from shopdistill_assets.corpus.reasons import REASONS, reasons_markdown

ROOT = Path(__file__).resolve().parents[1]


def test_architecture_lists_every_reason_code():
    text = (ROOT / "docs/architecture.md").read_text()
    assert reasons_markdown().strip() in text
    assert all(f"`{code}`" in text for code in REASONS)


def test_readme_opens_with_the_two_commands():
    head = (ROOT / "README.md").read_text().split("\n")[:12]
    assert any("make demo" in line for line in head) and any("make test" in line for line in head)
