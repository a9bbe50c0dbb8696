"""Materialize assets for days, in-process, on the project's Dagster instance (what the CLI runs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dagster import AssetKey, materialize

from shopdistill_assets.instance import project_instance


@dataclass
class DayRun:
    day: str
    success: bool
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)  # asset -> metadata values
    checks: dict[str, bool] = field(default_factory=dict)
    error: str | None = None


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)


def _collect(result, run: DayRun) -> DayRun:
    for event in result.get_asset_materialization_events():
        mat = event.step_materialization_data.materialization
        run.metadata[mat.asset_key.to_user_string()] = {k: _plain(v) for k, v in mat.metadata.items()}
    for event in result.get_asset_check_evaluations():
        run.checks[event.check_name] = event.passed
    if not result.success:
        failures = [e for e in result.all_events if e.is_step_failure]
        run.error = "; ".join(str(e.step_failure_data.error.message).strip() for e in failures)[:2000] or "run failed"
    return run


def _selected(asset_names: list[str]):
    from shopdistill_assets.definitions import ASSET_CHECKS, ASSETS

    assets = [a for a in ASSETS if any(k.to_user_string() in asset_names for k in a.keys)]
    checks = [c for c in ASSET_CHECKS if any(k.asset_key.to_user_string() in asset_names for k in c.check_keys)]
    return [*assets, *checks]


def _run_config(log_level: str, ops: dict[str, Any] | None) -> dict[str, Any]:
    config: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": log_level}}}}
    if ops:
        config["ops"] = {name: {"config": cfg} for name, cfg in ops.items()}
    return config


def materialize_unpartitioned(resources: dict[str, Any], asset_names: list[str], ops: dict[str, Any] | None = None,
                              raise_on_error: bool = False, log_level: str = "WARNING") -> DayRun:
    """Snapshots (train_corpus, heldout_eval_set, stages): one run, no partition."""
    result = materialize(_selected(asset_names), instance=project_instance(), resources=resources,
                         raise_on_error=raise_on_error, run_config=_run_config(log_level, ops),
                         selection=[AssetKey.from_user_string(n) for n in asset_names])
    return _collect(result, DayRun("-", result.success))


def materialize_days(resources: dict[str, Any], asset_names: list[str], days: list[str], ops: dict[str, Any] | None = None,
                     raise_on_error: bool = False, log_level: str = "WARNING") -> list[DayRun]:
    """Each day in order (the leak state of day D builds on day D-1), one run per day, with the
    blocking checks of those assets."""
    instance = project_instance()
    selected = _selected(asset_names)
    runs = []
    for day in days:
        result = materialize(selected, partition_key=day, instance=instance, resources=resources,
                             raise_on_error=raise_on_error, selection=[AssetKey.from_user_string(n) for n in asset_names],
                             run_config=_run_config(log_level, ops))
        runs.append(_collect(result, DayRun(day, result.success)))
    return runs


def materialize_policies(resources: dict[str, Any], policies: list[str], ops: dict[str, Any] | None = None,
                         raise_on_error: bool = False, log_level: str = "WARNING") -> list[DayRun]:
    """`policy_eval` for each policy (a dynamic partition, added if new)."""
    from shopdistill_assets.evaluation import policy_partitions

    instance = project_instance()
    known = set(instance.get_dynamic_partitions(policy_partitions.name))
    instance.add_dynamic_partitions(policy_partitions.name, [p for p in policies if p not in known])
    runs = []
    for name in policies:
        result = materialize(_selected(["policy_eval"]), partition_key=name, instance=instance, resources=resources,
                             raise_on_error=raise_on_error, run_config=_run_config(log_level, ops))
        runs.append(_collect(result, DayRun(name, result.success)))
    return runs
