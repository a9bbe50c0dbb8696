"""The `shopdistill` command (`shopdistill_assets.cli:main`): demo, days, train, serve, eval, checks."""

from shopdistill_assets.cli.commands import main

__all__ = ["main"]
