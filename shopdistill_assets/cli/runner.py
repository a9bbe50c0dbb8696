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


def failure_line(event) -> str:
    """One line for a failed step: the asset and the innermost cause, not the stack."""
    data = event.step_failure_data
    user = getattr(data, "user_failure_data", None)
    if user is not None and user.description:
        text = user.description
    else:
        error = data.error
        while error is not None and error.cause is not None:
            error = error.cause
        text = f"{error.cls_name}: {error.message}" if error is not None else "step failed"
    return f"{event.step_key}: " + " ".join(str(text).split())


def step_throughput(instance, run_id: str) -> list[str]:
    """One line per finished step of a run: its time, and its rate over the rows it read (`in`)
    or wrote (`dagster/row_count`), from the run's own event log."""
    started, lines, units = {}, [], {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None or not event.step_key:
            continue
        if event.event_type_value == "STEP_START":
            started[event.step_key] = entry.timestamp
        elif event.event_type_value == "ASSET_MATERIALIZATION":
            meta = event.step_materialization_data.materialization.metadata
            value = meta.get("in", meta.get("dagster/row_count"))
            count = getattr(value, "value", value)
            if isinstance(count, int):
                units[event.step_key] = max(units.get(event.step_key, 0), count)
        elif event.event_type_value == "STEP_SUCCESS" and event.step_key in started:
            seconds = max(entry.timestamp - started[event.step_key], 1e-3)
            rows = units.get(event.step_key)
            rate = f", {rows:,} rows ({rows / seconds:,.0f} rows/s)" if rows else ""
            lines.append(f"{event.step_key}: {seconds:.1f} s{rate}")
    return lines


def _log_throughput(instance, result) -> None:
    """Per-step throughput into the run's log in the UI (an engine event), for runs of the CLI."""
    lines = step_throughput(instance, result.run_id)
    if lines:
        instance.report_engine_event("throughput: " + "; ".join(lines), result.dagster_run)


def _collect(result, run: DayRun) -> DayRun:
    for event in result.get_asset_materialization_events():
        mat = event.step_materialization_data.materialization
        run.metadata[mat.asset_key.to_user_string()] = {k: _plain(v) for k, v in mat.metadata.items()}
    for event in result.get_asset_check_evaluations():
        run.checks[event.check_name] = event.passed
    if not result.success:
        failures = [e for e in result.all_events if e.is_step_failure]
        run.error = "; ".join(failure_line(e) for e in failures)[:2000] or "run failed"
    return run


def _selected(asset_names: list[str]):
    from shopdistill_assets.definitions import ASSET_CHECKS, ASSETS

    assets = [a for a in ASSETS if any(k.to_user_string() in asset_names for k in a.keys)]
    checks = [c for c in ASSET_CHECKS if any(k.asset_key.to_user_string() in asset_names for k in c.check_keys)]
    return [*assets, *checks]


# Tags on every run this process launches; the CLI sets the command, so the UI's run list shows
# `shopdistill/command: corpus` rather than an anonymous __ephemeral_asset_job__.
RUN_TAGS: dict[str, str] = {}


def _tags(**extra: str) -> dict[str, str]:
    return {**RUN_TAGS, **extra}


# Failures come back as one line each (DayRun.error); the console logger's stack traces only
# with `shopdistill --verbose`, which sets this to INFO.
LOG_LEVEL = "CRITICAL"


def _run_config(log_level: str | None, ops: dict[str, Any] | None) -> dict[str, Any]:
    config: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": log_level or LOG_LEVEL}}}}
    if ops:
        config["ops"] = {name: {"config": cfg} for name, cfg in ops.items()}
    return config


def materialize_unpartitioned(resources: dict[str, Any], asset_names: list[str], ops: dict[str, Any] | None = None,
                              raise_on_error: bool = False, log_level: str | None = None) -> DayRun:
    """Snapshots (train_corpus, heldout_eval_set, stages): one run, no partition."""
    try:
        result = materialize(_selected(asset_names), instance=project_instance(), resources=resources,
                             raise_on_error=raise_on_error, run_config=_run_config(log_level, ops), tags=_tags(),
                             selection=[AssetKey.from_user_string(n) for n in asset_names])
    except Exception as exc:
        if raise_on_error:
            raise
        return DayRun("-", False, error=f"{type(exc).__name__}: " + " ".join(str(exc).split()))
    _log_throughput(project_instance(), result)
    return _collect(result, DayRun("-", result.success))


def _advance(progress, run: DayRun) -> None:
    if progress is not None:
        progress.advance(note=f"{run.day} {'ok' if run.success else 'FAILED'}")


def materialize_days(resources: dict[str, Any], asset_names: list[str], days: list[str], ops: dict[str, Any] | None = None,
                     raise_on_error: bool = False, log_level: str | None = None, progress=None) -> list[DayRun]:
    """Each day in order (the leak state of day D builds on day D-1), one run per day, with the
    blocking checks of those assets."""
    instance = project_instance()
    selected = _selected(asset_names)
    runs = []
    for day in days:
        try:
            result = materialize(selected, partition_key=day, instance=instance, resources=resources,
                                 raise_on_error=raise_on_error, tags=_tags(),
                                 selection=[AssetKey.from_user_string(n) for n in asset_names],
                                 run_config=_run_config(log_level, ops))
        except Exception as exc:  # a day that cannot even start (bad config, unknown partition)
            if raise_on_error:
                raise
            runs.append(DayRun(day, False, error=f"{type(exc).__name__}: " + " ".join(str(exc).split())))
            _advance(progress, runs[-1])
            continue
        _log_throughput(instance, result)
        runs.append(_collect(result, DayRun(day, result.success)))
        _advance(progress, runs[-1])
    return runs


def materialize_policies(resources: dict[str, Any], policies: list[str], ops: dict[str, Any] | None = None,
                         raise_on_error: bool = False, log_level: str | None = None, progress=None) -> list[DayRun]:
    """`policy_eval` for each policy (a dynamic partition, added if new)."""
    from shopdistill_assets.agent.policies_registry import policy_partitions

    instance = project_instance()
    known = set(instance.get_dynamic_partitions(policy_partitions.name))
    instance.add_dynamic_partitions(policy_partitions.name, [p for p in policies if p not in known])
    runs = []
    for name in policies:
        result = materialize(_selected(["policy_eval"]), partition_key=name, instance=instance, resources=resources,
                             raise_on_error=raise_on_error, run_config=_run_config(log_level, ops), tags=_tags())
        _log_throughput(instance, result)
        runs.append(_collect(result, DayRun(name, result.success)))
        _advance(progress, runs[-1])
    return runs
