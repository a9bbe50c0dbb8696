"""The trace checks' funnel: what the named checks counted, and its cross-check against the tables.

Each check counts the traces it runs on as it runs (reasons.count_run: (stage, reason, passed |
failed)); the corpus step sums the counters of its files. The dedupe verdict is made for the
whole day after the checks ran, so the copies a later upload superseded were checked too:
`take_back` removes them by their recorded fate (their structural label and the check that
stopped them, if any), and what is left is the funnel of the day's tables.

`disagreements` is the conservation of those counters (a mismatch is a bug, never noise):
  - within a stage, each check passes what the next one sees: passed[i] == passed[i+1] + failed[i+1];
  - the structural filter sees every normalized trace and passes the agentic and sub-task ones;
    the reasoning gate sees every agentic trace; the format gate sees what the reasoning gate
    passed and passes exactly the gated traces;
  - each check's failures are the ledger's rows of its (stage, reason).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from shopdistill_assets.corpus.gates import FORMAT_CHECKS, REASONING_CHECKS, SHAPE_FAILED_KEY
from shopdistill_assets.corpus.reasons import FAILED, PASSED, Check, Reason, Stage, count_run
from shopdistill_assets.corpus.structural import STRUCTURAL_CHECKS

CHECKS_OF: dict[str, tuple[Check, ...]] = {str(Stage.STRUCTURAL): STRUCTURAL_CHECKS,
                                           str(Stage.REASONING_GATE): REASONING_CHECKS,
                                           str(Stage.FORMAT_GATE): FORMAT_CHECKS}


def take_back(counts: Counter, label: str | None, stage: str | None, reason: str | None, n: int) -> None:
    """Remove `n` checked copies from `counts`, by their fate: structural `label`, and the
    (stage, reason) that stopped them (None for a kept trace). Follows decide.decide_line:
    every trace meets the structural checks, an agentic one then the reasoning gate, and one
    that passed it the format gate (whose guard, SHAPE_FAILED_KEY, precedes its checks)."""
    count_run(STRUCTURAL_CHECKS, reason if stage == Stage.STRUCTURAL else None, counts, -n)
    if label != "agentic":
        return
    count_run(REASONING_CHECKS, reason if stage == Stage.REASONING_GATE else None, counts, -n)
    if stage == Stage.REASONING_GATE:
        return
    if (stage, reason) == SHAPE_FAILED_KEY[:2]:
        counts[SHAPE_FAILED_KEY] -= n
        return
    count_run(FORMAT_CHECKS, reason if stage == Stage.FORMAT_GATE else None, counts, -n)


def day_check_counts(checks: Iterable[Counter], superseded: Iterable[Counter]) -> Counter:
    """The day's check counters: the files' counters summed (each worker counts its files),
    then the superseded copies ((label, stage, reason) -> copies, per file) taken back."""
    total: Counter = Counter()
    for counts in checks:
        total.update(counts)
    for fates in superseded:
        for (label, stage, reason), n in fates.items():
            take_back(total, label, stage, reason, n)
    return total


@dataclass(frozen=True)
class StageFunnel:
    """One check stage's numbers, from its checks' counters."""

    stage: str
    entered: int  # traces that met the stage
    passed: int  # traces that passed every check of it
    failed: dict[str, int]  # reason -> traces stopped with it (the stage's guard included)
    checks: dict[str, tuple[int, int]]  # check reason -> (passed, failed), in check order

    @property
    def rejected(self) -> int:
        return sum(self.failed.values())


def stage_funnel(counts: Counter, stage: str) -> StageFunnel:
    checks = CHECKS_OF[stage]
    per_check = {c.reason: (counts[c.passed_key], counts[c.failed_key]) for c in checks}
    guard = counts[SHAPE_FAILED_KEY] if stage == Stage.FORMAT_GATE else 0
    failed = {reason: f for reason, (_, f) in per_check.items()}
    if guard:
        failed[str(Reason.DIALECT_VIOLATION)] = guard
    first_passed, first_failed = per_check[checks[0].reason]
    return StageFunnel(stage, guard + first_passed + first_failed, per_check[checks[-1].reason][0], failed, per_check)


def disagreements(counts: Counter, ledger: Counter, rows: dict[str, int]) -> list[str]:
    """Where the checks' counters (superseded copies taken back) disagree with the ledger's
    rows per (stage, reason) and the tables' row counts, each message starting with its
    stage; [] when they agree."""
    wrong = [f"{stage}/{reason}/{outcome} is {n} < 0" for (stage, reason, outcome), n in counts.items() if n < 0]
    funnels = {stage: stage_funnel(counts, stage) for stage in CHECKS_OF}

    def expect(what: str, got: int, want: int, of: str) -> None:
        if got != want:
            wrong.append(f"{what}: {got} counted by the checks, {want} {of}")

    for stage, funnel in funnels.items():
        checks = list(funnel.checks.items())
        for (name, (passed, _)), (after, (next_passed, next_failed)) in zip(checks, checks[1:]):
            expect(f"{stage}: {name} passed", passed, next_passed + next_failed, f"met {after}")
        for reason in sorted(set(funnel.failed) | {r for s, r in ledger if s == stage}):
            expect(f"{stage}/{reason} failed", funnel.failed.get(reason, 0), ledger.get((stage, reason), 0),
                   "ledger rows")
    structural, reasoning, fmt = (funnels[str(s)] for s in (Stage.STRUCTURAL, Stage.REASONING_GATE, Stage.FORMAT_GATE))
    expect("structural: entered", structural.entered, rows["normalized_traces"], "normalized_traces rows")
    expect("structural: passed", structural.passed, rows["agentic_traces"] + rows["subtask_traces"],
           "agentic_traces + subtask_traces rows")
    expect("reasoning_gate: entered", reasoning.entered, rows["agentic_traces"], "agentic_traces rows")
    expect("format_gate: entered", fmt.entered, reasoning.passed, "passed the reasoning gate")
    expect("format_gate: passed", fmt.passed, rows["gated_traces"], "gated_traces rows")
    return wrong


def check_metadata(funnel: StageFunnel) -> dict[str, int]:
    """`check/<reason>/passed|failed` for each check of the stage, in check order."""
    return {f"check/{reason}/{outcome}": n for reason, (passed, failed) in funnel.checks.items()
            for outcome, n in ((PASSED, passed), (FAILED, failed))}
