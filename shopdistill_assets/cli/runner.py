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


def _portable(resources: dict[str, Any]) -> dict[str, Any]:
    """Resources as (class, fields) for another process: a ConfigurableResource pickles but does
    not unpickle (its config schema), and its EnvVar fields must stay unresolved."""
    from dagster import ConfigurableResource

    return {key: (type(r), {f: getattr(r, f) for f in type(r).model_fields}) if isinstance(r, ConfigurableResource)
            else r for key, r in resources.items()}


def _policy_run(resources: dict[str, Any], name: str, ops: dict[str, Any] | None, raise_on_error: bool,
                log_level: str | None, tags: dict[str, str]) -> DayRun:
    resources = {key: r[0](**r[1]) if isinstance(r, tuple) else r for key, r in resources.items()}
    instance = project_instance()
    result = materialize(_selected(["policy_eval"]), partition_key=name, instance=instance, resources=resources,
                         raise_on_error=raise_on_error, run_config=_run_config(log_level, ops), tags=tags)
    _log_throughput(instance, result)
    return _collect(result, DayRun(name, result.success))


def _worker_threads(threads: int) -> None:
    """A pool worker's torch threads: the machine's cores shared among the workers, not each
    worker taking all of them (on 2 cores, 2 one-thread evaluations beat 1 two-thread one)."""
    import torch

    torch.set_num_threads(threads)


def materialize_policies(resources: dict[str, Any], policies: list[str], ops: dict[str, Any] | None = None,
                         raise_on_error: bool = False, log_level: str | None = None, progress=None,
                         workers: int = 1) -> list[DayRun]:
    """`policy_eval` for each policy (a dynamic partition, added if new), one run each.

    workers > 1 runs that many evaluations at once, each in its own process (spawned: no torch or
    Dagster state forked) with the cores split between them; a small checkpoint's decoding is
    mostly Python, so processes, not threads, use a second core. Results keep `policies`' order."""
    import os

    from shopdistill_assets.agent.policies_registry import policy_partitions

    instance = project_instance()
    known = set(instance.get_dynamic_partitions(policy_partitions.name))
    instance.add_dynamic_partitions(policy_partitions.name, [p for p in policies if p not in known])
    workers = max(1, min(workers, len(policies)))
    if workers == 1:
        runs = []
        for name in policies:
            runs.append(_policy_run(resources, name, ops, raise_on_error, log_level, _tags()))
            _advance(progress, runs[-1])
        return runs
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    threads = max(1, (os.cpu_count() or 1) // workers)
    by_name: dict[str, DayRun] = {}
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_worker_threads, initargs=(threads,)) as pool:
        portable = _portable(resources)
        futures = {pool.submit(_policy_run, portable, name, ops, raise_on_error, log_level or LOG_LEVEL, _tags()): name
                   for name in policies}
        for future in as_completed(futures):
            by_name[futures[future]] = future.result()
            _advance(progress, by_name[futures[future]])
    return [by_name[name] for name in policies]
