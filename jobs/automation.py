"""Automation conditions: the split and the snapshots follow the corpus by themselves.

The firehose sensor (or the schedule, or a backfill) runs the corpus for a day; from there the
declarative automation sensor that Dagster starts by default materializes the rest:

    normalized_traces[D] ─► leak_clusters[D] ─► split_traces[D] ─► train_corpus, heldout_eval_set
                  every corpus table ─► corpus_funnel

Conditions are attached by asset key in definitions.py, so the asset modules stay free of
scheduling policy.
"""

from __future__ import annotations

from dagster import AssetSelection, AutomationCondition

# Missing, or an input changed, since this target was last requested or updated. Unlike
# `since_last_handled`, the first evaluation does not reset it: days that the CLI processed
# before the daemon ever ran are caught up too. A missing target whose last run failed (a home
# without the held-out suites, say) waits for an input to change: `missing` alone would request it
# again on every tick, a failed run a minute for as long as the daemon runs.
_HANDLED = AutomationCondition.newly_requested() | AutomationCondition.newly_updated()
_MISSING = AutomationCondition.missing() & ~AutomationCondition.execution_failed()
_UPDATED = (_MISSING | AutomationCondition.any_deps_updated()).since(_HANDLED)
_QUIET = ~AutomationCondition.any_deps_in_progress() & ~AutomationCondition.in_progress()


def follow_day() -> AutomationCondition:
    """Every day partition (not only the latest, unlike `eager`), once its own day's inputs
    exist. A day waits while the previous day runs (the self-dependency is in progress); a
    previous day that is missing does not block (the leak replay reads every earlier day from
    the lake), and when it arrives later its update runs this day again."""
    own_day_inputs = ~AutomationCondition.any_deps_match(AutomationCondition.missing()).ignore(
        AssetSelection.assets("leak_clusters"))
    return (_UPDATED & own_day_inputs & _QUIET).with_label("follow_day")


def follow_inputs() -> AutomationCondition:
    """Every day partition, once all its inputs exist (split_traces: that day's gated traces
    and leak clusters)."""
    return (_UPDATED & ~AutomationCondition.any_deps_missing() & _QUIET).with_label("follow_inputs")


def follow_days() -> AutomationCondition:
    """An unpartitioned snapshot over the daily tables: once some day exists, after any day
    updates, and while none is running."""
    some_day = AutomationCondition.any_deps_match(~AutomationCondition.missing())
    return (_UPDATED & some_day & _QUIET).with_label("follow_days")


# asset key -> condition; keys that a code location lacks are ignored.
CONDITIONS = {
    "leak_clusters": follow_day,
    "split_traces": follow_inputs,
    "train_corpus": follow_days,
    "heldout_eval_set": follow_days,
    "corpus_funnel": follow_days,
}
