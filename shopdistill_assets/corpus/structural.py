"""Structural filter: agentic (axis A) vs sub-task (axis B) traces, from recorded evidence.

Axis A: the LLM emits the tool calls (inference -> tool -> inference, about one inference a
step). Axis B: a Python harness searches and the LLM only classifies or picks; its dialogue
is often rebuilt afterwards. The dialogue's `content` is rebuilt by the agent helper and
`think` may be templated, so the primary dialect is judged mainly on the validator's proxy log
(the `proxy_evidence` column written by the reader), see NOTES.md.

Decision (primary dialect). Each signal adds points towards sub-task (+) or agentic (-):

  +2 hung_on_step0        every proxy call hangs on step 0 of a multi-step dialogue
  +2 search_excess        proxy /search/* calls > ratio x the dialogue's catalogue calls
                          (and by at least `search_excess_min`)
  -1 search_matches       proxy searches equal the dialogue's catalogue calls (within 1)
  +2 classify_calls       most inference calls look like classify/pick calls: small
                          max_tokens, a response_format, or a tiny completion
  +2 no_inference         catalogue searches but not one inference call
  -2 emits_tool_call      a logged completion contains a tool call (<tool_call>, a tool
                          name, or native tool_calls)
  -2 native_tools         an inference request offered `tools` (native function calling)
  -1 inference_per_step   about one inference call a step (0.5 to 2 per step)
  +1 few_inference        fewer than one inference call per two steps
  +1 terse_thinks         median think shorter than `terse_think_chars`
  +1 templated_thinks     most thinks identical once digits and spacing are ignored

score >= `subtask_threshold` -> subtask, otherwise agentic. A primary trace whose proxy log
is absent entirely carries no evidence either way: `no_evidence_label` (default: reject,
`structural_unclear`; the judge would also score such a run 0.1, since it saw no inference).

Other dialects have no proxy log. `shoppingbench.rollout` and `openai.messages` are by
construction dialogues whose assistant turns emit the tool calls, so they are agentic; the
evidence says so. Any trace without a single tool call is rejected (`no_tool_calls`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from statistics import median
from typing import Any, Literal

import orjson

from shopdistill_assets.corpus.dialects import CATALOGUE_TOOLS, PRIMARY
from shopdistill_assets.corpus.reasons import Check, Rejection, Stage, count_run

Label = Literal["agentic", "subtask", "reject"]
_DIGITS = b"0123456789"
SHAPE_HEAD_CHARS = 256  # of a think, read to find its first words
SHAPE_HEAD_WORDS = 8


# The filter's three rejections, in the order classify() meets them. They are decided by the
# classifier below (its signals and score), not tested one by one: checks without a test.
NO_TOOL_CALLS = Check("no_tool_calls", Stage.STRUCTURAL, "the dialogue contains no tool call at all")
STRUCTURAL_UNCLEAR = Check("structural_unclear", Stage.STRUCTURAL,
                           "no proxy evidence to tell an agentic run from a sub-task one")
NO_INFERENCE = Check("no_inference", Stage.STRUCTURAL,
                     "the proxy log shows tool calls but no inference call: no LLM wrote any of it")
STRUCTURAL_CHECKS: tuple[Check, ...] = (NO_TOOL_CALLS, STRUCTURAL_UNCLEAR, NO_INFERENCE)
_CHECK_OF = {c.reason: c for c in STRUCTURAL_CHECKS}


@dataclass(frozen=True)
class StructuralConfig:
    """Every threshold of the structural filter."""

    search_excess_ratio: float = 1.5
    search_excess_min: int = 3
    classify_max_tokens: int = 64  # requests capped this low are classify/pick calls
    short_completion_tokens: int = 30  # the judge's own floor for a "real" inference call
    classify_share: float = 0.5
    terse_think_chars: int = 40
    templated_share: float = 0.6
    templated_min_turns: int = 3
    subtask_threshold: int = 2
    no_evidence_label: Label = "reject"
    no_inference_label: Label = "reject"  # proxy log with tool calls but no inference call at all


@dataclass(frozen=True)
class StructuralDecision:
    label: Label
    reason: str | None
    evidence: dict[str, Any] = field(default_factory=dict)

    def evidence_json(self) -> str:
        """The `structural_evidence` column."""
        return orjson.dumps(self.evidence).decode()

    def rejection(self) -> Rejection | None:
        return None if self.reason is None else _CHECK_OF[self.reason].reject(self.evidence.get("note", ""))


def parse_messages(messages_json: Any) -> Any:
    """The `messages` column parsed; None where it is not JSON text. Callers that have it
    already (a fused corpus pass) hand it to `classify` and `format_gate` instead."""
    try:
        return orjson.loads(messages_json) if isinstance(messages_json, (str, bytes)) else None
    except orjson.JSONDecodeError:
        return None


def _dialogue_facts(messages: Any) -> tuple[list[list[str]], list[str]]:
    """(tool names per assistant turn, think per assistant turn) from the parsed messages."""
    turns: list[list[str]] = []
    thinks: list[str] = []
    for m in messages if isinstance(messages, list) else ():
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        names = []
        for c in m.get("tool_calls") or ():
            fn = c.get("function") if isinstance(c, dict) else None
            if isinstance(fn, dict) and isinstance(name := fn["name"], str):
                names.append(name)
        turns.append(names)
        think = m.get("reasoning_content")
        thinks.append(think if isinstance(think, str) else "")
    return turns, thinks


def _list(v: Any) -> list:
    return v if isinstance(v, list) else []


def parse_evidence(proxy_json: Any) -> Any:
    """The `proxy_evidence` column parsed; None where it is not JSON text."""
    try:
        return orjson.loads(proxy_json) if isinstance(proxy_json, (str, bytes)) else None
    except orjson.JSONDecodeError:
        return None


def _proxy_steps(ev: Any) -> list[tuple[list[dict], int, int]] | None:
    """Per step (inference summaries, search calls, other calls) of the parsed evidence;
    None without any proxy log."""
    if not isinstance(ev, dict):
        return None
    steps = []
    for s in _list(ev.get("steps")):
        if isinstance(s, dict):
            inference = [c for c in _list(s.get("inference")) if isinstance(c, dict)]
            other = s.get("other") if isinstance(s.get("other"), int) else 0
            steps.append((inference, len(_list(s.get("search"))), other))
    return steps if any(i or n or o for i, n, o in steps) or ev.get("dropped") else None


def _is_classify_call(call: dict, cfg: StructuralConfig) -> bool:
    mt, ct = call.get("max_tokens"), call.get("completion_tokens")
    return bool(
        (isinstance(mt, int) and mt <= cfg.classify_max_tokens)
        or call.get("response_format")
        or (isinstance(ct, int) and ct < cfg.short_completion_tokens and not call.get("emits_tool_call"))
    )


def _drop_digits(text: str) -> str:
    """`text` without its ASCII digits. Through bytes: str.translate with a table costs
    microseconds per call even on short text, and in UTF-8 an ASCII digit is a byte of its own
    (surrogatepass: lone surrogates from hostile JSON round-trip too)."""
    return text.encode("utf-8", "surrogatepass").translate(None, _DIGITS).decode("utf-8", "surrogatepass")


def _think_shape(think: str) -> str:
    """A think with digits, case and spacing ignored: templated thinks share one shape."""
    return " ".join(_drop_digits(think).lower().split())


def _shape_head(think: str) -> tuple[str, ...]:
    """The first SHAPE_HEAD_WORDS words of `_think_shape(think)`, mostly from a short prefix.

    A function of the shape alone, so thinks of one shape share it: when no head is shared
    by enough thinks, no shape is either, and the full shapes (the costly part: long thinks,
    many words) need not be computed. Digits, case and spaces act per character, so a
    prefix's words are the shape's first words, bar the last one, which the cut may split.
    """
    words = _drop_digits(think[:SHAPE_HEAD_CHARS]).lower().split()
    if len(words) > SHAPE_HEAD_WORDS or len(think) <= SHAPE_HEAD_CHARS:
        return tuple(words[:SHAPE_HEAD_WORDS])
    return tuple(_think_shape(think).split()[:SHAPE_HEAD_WORDS])  # few, long words


def _templated(thinks: list[str], cfg: StructuralConfig) -> bool:
    """Whether one shape holds at least `templated_share` of the thinks."""
    if max(Counter(map(_shape_head, thinks)).values()) / len(thinks) < cfg.templated_share:
        return False
    return max(Counter(map(_think_shape, thinks)).values()) / len(thinks) >= cfg.templated_share


def _think_signals(thinks: list[str], cfg: StructuralConfig) -> dict[str, int]:
    out: dict[str, int] = {}
    if thinks and median(list(map(len, thinks))) < cfg.terse_think_chars:
        out["terse_thinks"] = 1
    if len(thinks) >= cfg.templated_min_turns and _templated(thinks, cfg):
        out["templated_thinks"] = 1
    return out


def _proxy_signals(steps: list[tuple[list[dict], int, int]], turns: list[list[str]], cfg: StructuralConfig) -> tuple[dict, dict]:
    """(signal -> points, counts) for a primary trace with a proxy log."""
    inference: list[dict] = []
    searches = n_calls = 0
    busy = []
    for step_inference, step_searches, step_other in steps:
        inference += step_inference
        searches += step_searches
        n_calls += len(step_inference) + step_searches + step_other
        busy.append(bool(step_inference or step_searches or step_other))
    dialogue_catalogue = sum(1 for names in turns for n in names if n in CATALOGUE_TOOLS)
    n_steps = max(len(turns), 1)
    sig: dict[str, int] = {}
    if len(steps) >= 2 and busy[0] and not any(busy[1:]):
        sig["hung_on_step0"] = 2
    if searches > cfg.search_excess_ratio * max(dialogue_catalogue, 1) and searches - dialogue_catalogue >= cfg.search_excess_min:
        sig["search_excess"] = 2
    elif dialogue_catalogue and abs(searches - dialogue_catalogue) <= 1:
        sig["search_matches"] = -1
    if inference:
        classify = emits = tools = 0
        for c in inference:  # one pass: a few calls a step, every primary trace
            classify += _is_classify_call(c, cfg)
            emits = emits or bool(c.get("emits_tool_call"))
            tools = tools or bool(c.get("tools"))
        if classify / len(inference) >= cfg.classify_share:
            sig["classify_calls"] = 2
        if emits:
            sig["emits_tool_call"] = -2
        if tools:
            sig["native_tools"] = -2
        per_step = len(inference) / n_steps
        if 0.5 <= per_step <= 2:
            sig["inference_per_step"] = -1
        elif per_step < 0.5:
            sig["few_inference"] = 1
    elif searches:
        sig["no_inference"] = 2
    counts = {
        "proxy_calls": n_calls, "inference_calls": len(inference), "search_calls": searches,
        "dialogue_catalogue_calls": dialogue_catalogue, "steps": len(turns),
        "steps_with_proxy_calls": sum(busy),
    }
    return sig, counts


_UNPARSED = object()


def classify(row: dict, cfg: StructuralConfig | None = None, *, messages: Any = None,
             evidence: Any = _UNPARSED, counts: Counter | None = None) -> StructuralDecision:
    """Label one canonical trace agentic / subtask / reject, with the evidence behind it.

    `messages`, `evidence`: the row's `messages` and `proxy_evidence` columns already parsed
    (see `parse_messages`, `parse_evidence`; the fused corpus pass has them as objects).
    `counts`: the STRUCTURAL_CHECKS' counters (reasons.count_run): a trace passes each check
    the classifier did not reject it with, up to the one it did.
    """
    decision = _classify(row, cfg or StructuralConfig(), messages, evidence)
    if counts is not None:
        count_run(STRUCTURAL_CHECKS, decision.reason, counts)
    return decision


def _classify(row: dict, cfg: StructuralConfig, messages: Any, evidence: Any) -> StructuralDecision:
    if messages is None:
        messages = parse_messages(row.get("messages"))
    turns, thinks = _dialogue_facts(messages)
    n_calls = sum(len(t) for t in turns)
    if n_calls == 0:
        return StructuralDecision("reject", NO_TOOL_CALLS.reason, {"basis": "dialogue", "note": "no tool calls"})
    dialect = row.get("dialect")
    if dialect != PRIMARY:
        note = "no proxy log in this dialect; its assistant turns emit the tool calls themselves"
        return StructuralDecision("agentic", None, {"basis": "dialect", "dialect": dialect, "note": note})
    steps = _proxy_steps(parse_evidence(row.get("proxy_evidence")) if evidence is _UNPARSED else evidence)
    if steps is None:
        ev = {"basis": "none", "note": "no proxy calls recorded"}
        label = cfg.no_evidence_label
        return StructuralDecision(label, STRUCTURAL_UNCLEAR.reason if label == "reject" else None, ev)
    signals, counts = _proxy_signals(steps, turns, cfg)
    if counts["inference_calls"] == 0 and cfg.no_inference_label == "reject":
        # A decoy: the tools ran, but no model was ever asked anything. Neither agentic data nor
        # material for lifting a sub-task policy.
        ev = {"basis": "proxy", "signals": signals, "counts": counts}
        return StructuralDecision("reject", NO_INFERENCE.reason, ev)
    signals.update(_think_signals(thinks, cfg))
    score = sum(signals.values())
    label: Label = "subtask" if score >= cfg.subtask_threshold else "agentic"
    return StructuralDecision(label, None, {"basis": "proxy", "score": score, "signals": signals, "counts": counts})
