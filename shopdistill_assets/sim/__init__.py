"""The SN15 arena simulator: a catalog, problem suites, and miner agents that act in the sandbox.

Deterministic from a seed: the same arguments write the same bytes.
"""

from shopdistill_assets.sim.arena import ArenaConfig, simulate

__all__ = ["ArenaConfig", "simulate"]
