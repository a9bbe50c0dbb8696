"""Proof that the pipeline distils: a small Qwen3, trained offline on a simulated arena, gains
held-out ASR stage by stage; and the gated corpus beats the unfiltered one.

    python benchmarks/distill.py [--out DIR] [--quick] [--days 3] [--traces-per-day 1500]
                                 [--problems-per-day 250] [--size small] [--sft-steps 260] ...

Everything goes through the project's assets on the project's Dagster instance under --out
(SHOPDISTILL_HOME), each training stage a real `deepspeed` launch through Dagster Pipes:
  1. simulate the arena; the corpus assets for every day; the leak split; heldout_eval_set and
     train_corpus snapshots
  2. the base model: a randomly initialised Qwen3 (--size) whose BPE tokenizer is trained on
     train_corpus text (train side only); or --base-model, a given (pretrained) model
  3. the ablation first: train_corpus from normalized_traces (no structural filter, no gates) and
     the sft stage on it; then train_corpus from the gated traces and the sft stage on it. Both keep
     successful trajectories only and get the same token budget (steps scaled by mean row length)
  4. resft (k rollouts per train problem from sft, reward-1 kept), teacher_sft (the fair teacher:
     no ground truth), kto, dr_grpo, each from the stage before
  5. policy_eval of the fair policy (the learnability ceiling), the base model, the ablation and
     every stage, k samples per held-out problem (default 30 x 8); then the teacher-forced step
     match of each on the fair policy's held-out trajectories (`eval.step_match`)
  6. report.md / report.png / report.json in CHECKPOINTS/reports/distill-<time>/, next to the
     checkpoints' lineage: every row names its checkpoint version and its corpus version
Wall and CPU time (this process and its children) are printed per phase: on a shared machine the
CPU seconds / 2 estimate what two quiet cores need.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import sys
import time
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHAIN = ["sft", "resft", "teacher_sft", "kto", "dr_grpo"]
# A CPU-served checkpoint answers 8 episodes' turns in one batch: on a shared machine an episode of
# 10 turns can outlast ORO's 300 s, which would score the machine's load, not the policy.
# The gates' defaults (SHARE, CHUNK, MOST), set by parse_args where a flag is UNGIVEN.
PICKING_UNTIL = (0.5, 250, 1000)
RECOMMENDING_UNTIL = (0.35, 300, 1000)
UNGIVEN = object()  # a gate flag left off the command line
# The recommend phase's parts after the first (run13's recipe): the search step with renamed ids
# and words, then recommend-only steps at a lower rate.
DEFAULT_THEN = ("400,searches,ids=1,words=1", "300,ids=1,lr=3e-4")
DEADLINES = {"request_timeout_s": 900.0, "episode_time_limit_s": 3600.0}
TIMES: list[tuple[str, float, float]] = []


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(REPO / ".shopdistill-distill"), help="SHOPDISTILL_HOME of the run (replaced)")
    p.add_argument("--quick", action="store_true", help="a smoke run: small arena, few steps (minutes)")
    p.add_argument("--reuse-base", action="store_true", help="resume a run that stopped after its base was built: "
                   "keep --out's arena, lake and base (give the flags of the run that built them) and start at the "
                   "SFT stages (the base phases were 57 of run16's 81 minutes); where only the recommend phase's folder is "
                   "missing, that phase is built first on the one before it (to try other recommend flags on a base)")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--days", type=int, default=3)
    p.add_argument("--traces-per-day", type=int, default=1500)
    p.add_argument("--problems-per-day", type=int, default=250)
    p.add_argument("--heldout-share", type=float, default=0.1)
    p.add_argument("--base-model", default=None, help="start from this model (a Hugging Face id such as "
                   "Qwen/Qwen3-0.6B, or a local folder) instead of building a random small Qwen3: a base that "
                   "already reads and copies (--size, --vocab and --whole-pieces then do not apply)")
    p.add_argument("--size", default="h128l4", help="model shape (tiny_model.SMALL_SIZES); h128l4 learned the most "
                   "per CPU-minute in the pilots (benchmarks/results/distill/README.md)")
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--whole-pieces", action=argparse.BooleanOptionalAction, default=True,
                   help="the fixed prompt (system prompt, each tool schema) is one token a piece: rows ~2x shorter")
    p.add_argument("--whole-ids", action=argparse.BooleanOptionalAction, default=False,
                   help="catalogue product and shop ids one token each; measured: their embeddings collapse and the "
                   "model never copies one (benchmarks/results/distill/README.md), so ids are digit groups by default")
    p.add_argument("--identity-tokens", action=argparse.BooleanOptionalAction, default=True,
                   help="spaces and punctuation split off every word and number (tiny_model.IDENTITY_SPLIT): a word, "
                   "a number or an id is the same tokens wherever it stands, so a copy is a lookup, not a mapping")
    p.add_argument("--digit-pairs", action=argparse.BooleanOptionalAction, default=False,
                   help="with --identity-tokens: numbers split with no lone digit (tiny_model.IDENTITY_SPLIT_NO_LONE_DIGIT), "
                   "an id 3+3+2+2 digits instead of 3+3+3+1; the lone last digit is the piece copied last (run18's "
                   "recommend phase: 0.38 where the other pieces are 0.75-0.80); a new base; run19: its pick did not form "
                   "(0.205), but where the first piece was right the whole id was too (0.95 of the time, 0.71 in 3+3+3+1)")
    p.add_argument("--key-pieces", action=argparse.BooleanOptionalAction, default=True,
                   help="the JSON before an id one token each (tiny_model.ID_KEY_PIECES), so the first result's id "
                   "follows a token of its own: learn_picking's first token after 4 pages 0.515 with them (run4), "
                   "0.25 without")
    p.add_argument("--pretrain-steps", type=int, default=800, help="the base reads arena text first (training/"
                   "arena_base.py: catalogue browsing transcripts and train-side trajectories, loss on every token), "
                   "one text a step; 0: the random base as it is")
    p.add_argument("--pretrain-lr", type=float, default=2e-3)
    p.add_argument("--picking", action=argparse.BooleanOptionalAction, default=True,
                   help="after the reading, the base learns to look at the first result of the last page (arena_base."
                   "learn_picking: one page, then 2, then 4, AdamW --picking-lr, loss on the looked-at ids; ~40 CPU "
                   "min): pick_probe.py measured it learnable this way; on since run4 (results/distill/README.md)")
    p.add_argument("--picking-lr", type=float, default=5e-4)
    p.add_argument("--picking-served", action=argparse.BooleanOptionalAction, default=False,
                   help="picking transcripts as the evaluation serves them (system prompt, tool schemas) with looks "
                   "drawn from view and recommend calls; measured (run5): learned less, no closer to the held-out "
                   "recommendations")
    gate(p, "--picking-until", PICKING_UNTIL,
         "after the pick curriculum, while its last phase's first-token share is below SHARE, one more "
         "phase like it of CHUNK steps, at most MOST extra steps (arena_base.learn_picking until=); run16's "
         "pick did not form (0.225) and its recommend phase then learned no id (0.0); 1,000 more 4-page "
         "steps took that pick to 0.51 (~14 min); a pick that forms (run17: 0.685) costs nothing", "the pick curriculum only, however far it got")
    gate(p, "--recommending-until", RECOMMENDING_UNTIL,
         "while part 1 of the recommend phase leaves the kept-back whole id below SHARE, part 1 again "
         "for CHUNK steps on the model it left (fresh draws, its own warmup), at most MOST extra steps with "
         "the pick's extra steps (--picking-until) counted in, so the two gates together add at most ~15 "
         "min; run13-15's part 1 of 1,600 steps ended at whole id 0.84 / 0.41 / 0.37 and their phases "
         "at 0.70-0.83, run17's of 1,000 at 0.16 and its phase at 0.22; run18 (run17's draw): 300 more steps, "
         "0.22 -> 0.19", "part 1 of the recommend phase for its steps only")
    p.add_argument("--recommending-steps", type=int, default=1600, help="then the base learns the arena's last step "
                   "where it is served: the fair policy's recommend_product steps on train-side problems, loss on "
                   "the recommended ids (arena_base.learn_recommending), this many steps of --recommending-batch; "
                   "run6: the held-out recommend steps' first id token 0.094 -> 0.377; run13-15's 1,600 formed the "
                   "whole id (held-out 0.62-0.83 after the phase), run16-18's 1,000 did not (0.21-0.22): 1,600 since "
                   "run20 (0: no such phase, nor its --recommending-then parts)")
    p.add_argument("--recommending-searches", action=argparse.BooleanOptionalAction, default=False,
                   help="the recommend phase also learns the fair policy's find_product calls on the same problems: "
                   "each step a second update on as many search rows, loss on the argument values (the model's own "
                   "searches take 22-26 %% of their words from the request after SFT, run6); run8: 39 %% after SFT, but the "
                   "held-out pick 0.377 -> 0.245 and fewer format-valid episodes, ASR still 0: off by default")
    p.add_argument("--recommending-rename-ids", type=float, default=1.0, metavar="SHARE",
                   help="this share of the rows the recommend phase draws have every product id (results and call) "
                   "renamed, each draw anew, to another id the train rows show (arena_base.renamed_ids): those ids must be copied "
                   "from the page, not recalled (run7's phase reached whole id 0.29 on kept-back train-side steps "
                   "but 0.094 on held-out ones); run9 (0.5): held-out pick after SFT 0.302 -> 0.472 (whole id 0.094 -> "
                   "0.132); run13 (1.0, with the parts of --recommending-then): the first recipe whose gated SFT passes "
                   "held-out problems")
    p.add_argument("--recommending-rename-words", type=float, default=0.0, metavar="SHARE",
                   help="with --recommending-searches: this share of the search rows drawn have each word their call "
                   "copies from the request renamed, each draw anew, in the request, results and calls alike "
                   "(arena_base.renamed_words): the search's words must be copied from the request, not recalled")
    p.add_argument("--recommending-batch", type=int, default=4)
    p.add_argument("--recommending-measure-steps", type=int, default=400, metavar="N",
                   help="measure the kept-back train-side ids every N steps of each recommend part (first token, "
                   "whole id, by piece; the card's kept_back.curve): whether the copy formed shows before the part "
                   "ends (0: only before and after)")
    p.add_argument("--recommending-lr", type=float, default=1e-3)
    p.add_argument("--recommending-then", type=recommend_part, action="append", default=None, metavar="PART",
                   help="a further part of the recommend phase, on the model the part before it left (repeat for "
                   "more): STEPS, then any of `searches`, `ids=SHARE`, `words=SHARE` (with searches), `lr=RATE` "
                   "(default --recommending-lr), comma-separated; the flags above are the first part; `none`: no "
                   "further part. Default: " + " then ".join(DEFAULT_THEN) + " (run13's parts: its gated SFT reached "
                   "7.9 %% held-out ASR, 1.7 %% unfiltered; through all three parts the id copy formed under seeds "
                   "5 and 6 too, run14 and run15, whose gated SFTs reached 2.5 %% and 0.0 %%)")
    p.add_argument("--browsing-share", type=float, default=1.0, help="share of pretraining texts that are catalogue "
                   "browsing transcripts; the rest are gated train-side trajectories (below 1.0 the base has read the "
                   "gated corpus, which favours it in the gated-vs-unfiltered ablation)")
    p.add_argument("--copies-only", action="store_true", help="only measure, on one simulated day's successful "
                   "rows, the share of loss tokens copying a context token under each tokenizer (seconds), then exit")
    p.add_argument("--full-loss", action=argparse.BooleanOptionalAction, default=False,
                   help="sft stages: loss on every token of a row, not only the assistant turns (the forward pass "
                   "is paid for anyway); in a round 2 pilot it copied query words better, product ids worse")
    p.add_argument("--max-length", type=int, default=4096, help="identity tokens: rows average ~2,300 tokens")
    p.add_argument("--batch", type=int, default=1, help="sequences per optimizer step (sft stages; 1: no padding, "
                   "and a 4x smaller batch learned 1.6x faster per token in a pilot)")
    p.add_argument("--sft-steps", type=int, default=3600, help="1.25 CPU s a step with --whole-pieces in a pilot "
                   "(round 1: 1.5 s); tool-call format was learned between 400 and 800 steps; more steps fit the "
                   "search words and the first result's id further: on run20's base 3,600 steps reached 31.7 %% "
                   "held-out ASR against 19.2 %% at 2,400 (~4 min more for each of the two SFTs)")
    p.add_argument("--sft-lr", type=float, default=None, help="default 5e-4 for the random small model (the "
                   "rate at which the pick forms, pick_probe.py; run4 on), 1e-5 for a --base-model (a pretrained "
                   "model would forget at higher rates)")
    p.add_argument("--rollout-problems", type=int, default=12, help="train problems rolled out (resft, teacher)")
    p.add_argument("--rollout-samples", type=int, default=4, help="resft: rollouts per train problem (k)")
    p.add_argument("--resft-steps", type=int, default=24)
    p.add_argument("--teacher-steps", type=int, default=24)
    p.add_argument("--later-lr", type=float, default=3e-4, help="resft and teacher_sft learning rate")
    p.add_argument("--kto-steps", type=int, default=8)
    p.add_argument("--kto-lr", type=float, default=5e-5)
    p.add_argument("--kto-beta", type=float, default=0.1)
    p.add_argument("--grpo-steps", type=int, default=4)
    p.add_argument("--grpo-lr", type=float, default=1e-5)
    p.add_argument("--eval-samples", type=int, default=8)
    p.add_argument("--eval-workers", type=int, default=2, help="policies evaluated at once, each in its own process "
                   "with the cores split between them (materialize_policies(workers=)); measured on 2 cores: 2 "
                   "one-thread processes 1.6x one two-thread process")
    p.add_argument("--eval-limit", type=int, default=30, help="held-out problems evaluated (>= 30: the ASR interval "
                   "is over problems, and 10 problems bound ASR 0 only below 28 points)")
    p.add_argument("--step-match", action=argparse.BooleanOptionalAction, default=True,
                   help="teacher-forced next-step match of every policy on the fair policy's held-out trajectories")
    p.add_argument("--step-match-limit", type=int, default=None, help="held-out problems the step match reads "
                   "(default: --eval-limit); measured: the random small model, batched 8, ~1 CPU s a step at 160 "
                   "new tokens, so 30 problems (~150 steps) cost <= 2.5 min a policy")
    p.add_argument("--max-new-tokens", type=int, default=160, help="per model turn in rollouts and evaluation")
    args = p.parse_args(argv)
    if args.digit_pairs and not args.identity_tokens:
        p.error("--digit-pairs is a rule of the identity split: it needs --identity-tokens")
    if args.recommending_rename_words and not args.recommending_searches:
        p.error("--recommending-rename-words renames the search rows: it needs --recommending-searches")
    for flag, default in (("picking_until", PICKING_UNTIL), ("recommending_until", RECOMMENDING_UNTIL)):
        if getattr(args, flag) is UNGIVEN:  # not on the command line: the default, off in a smoke run
            setattr(args, flag, None if args.quick else default)
        if getattr(args, flag):
            share, chunk, most = getattr(args, flag)
            if chunk != int(chunk) or most != int(most) or not 1 <= chunk <= most:
                p.error(f"--{flag.replace('_', '-')} SHARE CHUNK MOST: CHUNK and MOST whole steps, 1 <= CHUNK <= MOST")
            setattr(args, flag, (share, int(chunk), int(most)))
    if args.recommending_then is None:
        args.recommending_then = [recommend_part(t) for t in DEFAULT_THEN] if args.recommending_steps else []
    args.recommending_then = [part for part in args.recommending_then if part is not None]  # `none`
    if args.recommending_then and not args.recommending_steps:
        p.error("--recommending-then continues the recommend phase: it needs --recommending-steps")
    if args.sft_lr is None:
        args.sft_lr = 1e-5 if args.base_model else 5e-4
    if args.quick:
        args.days, args.traces_per_day, args.problems_per_day = 2, 400, 80
        args.sft_steps, args.resft_steps, args.teacher_steps, args.kto_steps, args.grpo_steps = 12, 4, 4, 2, 2
        args.rollout_problems, args.rollout_samples, args.eval_samples, args.eval_limit = 6, 2, 2, 6
        args.heldout_share, args.pretrain_steps = 0.2, min(args.pretrain_steps, 16)
        args.recommending_steps = min(args.recommending_steps, 4)
        args.recommending_then = [{**part, "steps": min(part["steps"], 4)} for part in args.recommending_then]
    args.picking_curriculum = ((1, 4, 4), (2, 2, 2)) if args.quick else None
    return args


def gate(p: argparse.ArgumentParser, flag: str, default: tuple[float, int, int], help: str, off: str) -> None:
    """A phase's `SHARE CHUNK MOST` gate flag and its `--no-` form. Left off the command line it is
    UNGIVEN, and parse_args sets `default` (PICKING_UNTIL, RECOMMENDING_UNTIL), or nothing under
    --quick (a smoke run's phases never reach a share: the gate would spend its MOST); given, it holds
    under --quick too."""
    shown = " ".join(f"{v:g}" for v in default)
    p.add_argument(flag, type=float, nargs=3, default=UNGIVEN, metavar=("SHARE", "CHUNK", "MOST"),
                   help=f"{help} (default {shown}; --quick: off unless given)")
    p.add_argument("--no-" + flag[2:], dest=flag[2:].replace("-", "_"), action="store_const", const=None, help=off)


def recommend_part(text: str) -> dict[str, Any] | None:
    """One `--recommending-then` part: `STEPS[,searches][,ids=SHARE][,words=SHARE][,lr=RATE]`."""
    if text.strip() == "none":
        return None
    steps, *items = [item.strip() for item in text.split(",")]
    part: dict[str, Any] = {"steps": steps, "searches": False, "rename_ids": 0.0, "rename_words": 0.0, "lr": None}
    names = {"ids": "rename_ids", "words": "rename_words", "lr": "lr"}
    try:
        part["steps"] = int(steps)
        for item in items:
            key, _, value = item.partition("=")
            if item == "searches":
                part["searches"] = True
            elif key in names and value:
                part[names[key]] = float(value)
            else:
                raise ValueError(f"unknown item {item!r}")
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e} (STEPS[,searches][,ids=SHARE][,words=SHARE][,lr=RATE])")
    if part["steps"] < 1 or not (0 <= part["rename_ids"] <= 1 and 0 <= part["rename_words"] <= 1):
        raise argparse.ArgumentTypeError(f"{text!r}: steps >= 1 and shares within 0..1")
    if part["rename_words"] and not part["searches"]:
        raise argparse.ArgumentTypeError(f"{text!r}: words= renames the search rows: it needs searches")
    return part


def recommend_parts(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The recommend phase's parts, in order: the --recommending-* flags, then each --recommending-then
    (its learning rate --recommending-lr where it names none); none without --recommending-steps."""
    if not args.recommending_steps:
        return []
    first = {"steps": args.recommending_steps, "searches": args.recommending_searches, "lr": args.recommending_lr,
             "rename_ids": args.recommending_rename_ids, "rename_words": args.recommending_rename_words}
    return [first, *({**part, "lr": part["lr"] or args.recommending_lr} for part in args.recommending_then)]


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@contextmanager
def phase(name: str):
    wall, cpu = time.monotonic(), _cpu()
    print(f"== {name}", flush=True)
    yield
    TIMES.append((name, time.monotonic() - wall, _cpu() - cpu))
    print(f"   {name}: {TIMES[-1][1]:.0f} s wall, {TIMES[-1][2]:.0f} s CPU, load {os.getloadavg()[0]:.1f}", flush=True)


def _checked(run: Any, what: str) -> dict[str, Any]:
    if not run.success:
        raise SystemExit(f"{what} failed: {run.error}")
    return run.metadata


def stage_ops(args: argparse.Namespace, steps: int, lr: float, sft: bool = True, **extra: Any) -> dict[str, Any]:
    trainer = {"warmup_steps": 0.05, "logging_steps": 5, "gradient_checkpointing": False}  # a small model's activations fit
    if sft and args.full_loss:
        trainer["assistant_only_loss"] = False
    return {"max_steps": steps, "learning_rate": lr, "per_device_train_batch_size": args.batch,
            "max_length": args.max_length, "trainer_json": json.dumps(trainer), **extra}


def mean_tokens(rows: list[dict[str, Any]], tokenizer: Any, cap: int) -> float:
    """Mean rendered length (capped at max_length, as the trainer truncates) of successful rows."""
    lengths = []
    for r in rows:
        if (r.get("score") or 0) < 1:
            continue
        ids = tokenizer.apply_chat_template(r["messages"], tools=json.loads(r["tools"]) if r.get("tools") else None,
                                            tokenize=True, return_dict=False)
        lengths.append(min(len(ids), cap))
    return sum(lengths) / len(lengths) if lengths else 1.0


def build_base_model(args: argparse.Namespace, lake: Any, corpus_version: str, home: Path) -> Path | str:
    if args.base_model:  # a given model keeps its own tokenizer and chat template
        os.environ["SHOPDISTILL_BASE_MODEL"] = args.base_model
        return args.base_model
    from shopdistill_assets.sandbox.catalog import iter_documents
    from shopdistill_assets.training.tiny_model import (ID_KEY_PIECES, build_small_model, fixed_prompt_pieces,
                                                        render_conversations)

    rows = lake.read_snapshot("train_corpus", corpus_version).sort("trace_id").to_dicts()
    texts = render_conversations(rows[:: max(1, len(rows) // 400)])
    pieces: list[str] = [*fixed_prompt_pieces()] if args.whole_pieces else []
    if args.whole_ids:  # the catalogue is what the tools show, not any problem's answer
        products = list(iter_documents(home / "arena" / "catalog" / "documents.jsonl.gz"))
        pieces += sorted({str(p["product_id"]) for p in products} | {str(p["shop_id"]) for p in products if p.get("shop_id")})
    path = build_small_model(phase_folder(args, home, "-random"), texts, size=args.size, vocab_size=args.vocab,
                             seed=args.seed, whole_pieces=pieces, identity=args.identity_tokens,
                             key_pieces=ID_KEY_PIECES if args.key_pieces else (), no_lone_digit=args.digit_pairs,
                             max_positions=max(4096, args.max_length))
    if args.pretrain_steps:
        path = pretrain_base(args, path, rows, corpus_version, home)
    if args.picking:
        path = picking_base(args, path, home)
    if args.recommending_steps:
        path = recommending_base(args, path, lake, home)
    from transformers import AutoTokenizer

    from shopdistill_assets.training.tiny_model import loss_copy_share

    copies = loss_copy_share(AutoTokenizer.from_pretrained(path), texts[1:])  # train-side rows, as trained on
    print(f"   loss tokens copying a context token: {100 * copies['copies']:.1f}% (tool calls "
          f"{100 * copies['call_copies']:.1f}%), {copies['tokens_per_conversation']:.0f} tokens a row", flush=True)
    os.environ["SHOPDISTILL_BASE_MODEL"] = str(path)
    return path


def pretrain_base(args: argparse.Namespace, random_base: Path, rows: list[dict], corpus_version: str, home: Path) -> Path:
    """The random base reads arena text (training/arena_base.py); the result is the base."""
    from shopdistill_assets.training.arena_base import pretrain, pretraining_texts
    from shopdistill_assets.training.tiny_model import build_tokenizer, render_conversations

    texts = pretraining_texts(render_conversations(rows)[1:], home / "arena" / "catalog", args.pretrain_steps,
                              args.seed, build_tokenizer(vocab_size=300), args.browsing_share)
    out = phase_folder(args, home, "")
    card = pretrain(random_base, texts, out, lr=args.pretrain_lr, max_length=args.max_length, seed=args.seed,
                    sources={"train_corpus": corpus_version, "train_corpus_rows": len(rows),
                             "browsing_share": args.browsing_share, "catalog": "arena/catalog"})
    print(f"   pretrained on arena text: {card['steps']} steps, {card['tokens']:,} tokens, loss {card['first_loss']} -> "
          f"{card['final_loss']}, {card['seconds']:.0f} s", flush=True)
    return out


def picking_base(args: argparse.Namespace, base: Path, home: Path) -> Path:
    """The base learns the arena's most common pick (training/arena_base.learn_picking)."""
    from shopdistill_assets.training.arena_base import PICKING_CURRICULUM, SERVED_LOOKS, learn_picking

    out = phase_folder(args, home, "-picking")
    picking = learn_picking(base, home / "arena" / "catalog", out, curriculum=args.picking_curriculum or PICKING_CURRICULUM,
                            until=args.picking_until,
                            lr=args.picking_lr, max_length=args.max_length, seed=args.seed,
                            **({"looks": SERVED_LOOKS, "served": True} if args.picking_served else {}),
                            log=lambda line: print(f"   {line}", flush=True))
    for p in picking["phases"]:
        print(f"   picking, {p['pages']} page(s) before each look: {p['steps']} steps x {p['batch']}, {p['tokens']:,} "
              f"tokens, loss {p['final_loss']}, the looked-at id right: first token {p['first_token_right']}, whole "
              f"{p['whole_id_right']}", flush=True)
    return out


def renamed_note(renamed: dict[str, Any] | None, what: str = "ids") -> str:
    """The recommend phase's renaming, for its log line (nothing when it renamed none)."""
    return f"; {renamed['share']} of the rows' {what} renamed from a pool of {renamed['pool']}" if renamed else ""


def train_side_problems(lake: Any, home: Path) -> tuple[str, list[Any]]:
    """(leak_clusters day, its train-side suite problems): `split.train_side.train_side_truths` on the
    newest split, the selection train_problems writes (each problem's own identity on the train side)."""
    from shopdistill_assets.split.heldout import GroundTruth, load_problems
    from shopdistill_assets.split.train_side import train_side_truths
    from shopdistill_assets.training.data_assets import newest_leak_day

    day = newest_leak_day(lake)
    leak = lake.read_day("leak_clusters", day)
    return day, [truth for truth, *_ in train_side_truths(leak, GroundTruth(load_problems(home / "arena" / "suites")))]


def recommending_base(args: argparse.Namespace, base: Path, lake: Any, home: Path) -> Path:
    """The base learns the recommend step as served, on train-side problems only
    (training/arena_base.learn_recommending), in the parts `recommend_parts` names, each on the model
    the one before it left; the last saves to the `-recommending` folder, its card keeps the earlier
    parts' records (`recommending_earlier`)."""
    from shopdistill_assets.evaluation.step_match import teacher_conversations
    from shopdistill_assets.sandbox import load_catalog

    day, problems = train_side_problems(lake, home)
    calls = teacher_conversations(problems, load_catalog(home / "arena" / "catalog"),
                                  ("recommend_product", "find_product"))
    conversations = [(pid, c) for pid, name, c in calls if name == "recommend_product"]
    searches = [(pid, c) for pid, name, c in calls if name == "find_product"]
    parts, extra = recommend_parts(args), 0
    sources = {"leak_clusters_day": day, "train_side_problems": len(problems)}
    for number, part in enumerate(parts, 1):
        label = f" (part {number} of {len(parts)})" if len(parts) > 1 else ""
        out = phase_folder(args, home, f"-recommending-part{number}")
        card = recommending_part(args, base, out, part, conversations, searches, sources, label, args.seed)
        base = out
        if number == 1 and args.recommending_until:
            base, extra = recommended_until(args, home, base, card,
                                     lambda on, out, steps, seed, note: recommending_part(
                                         args, on, out, {**part, "steps": steps}, conversations, searches, sources,
                                         f"{label[:-1]}, {note})" if label else f" ({note})", seed))
    final = phase_folder(args, home, "-recommending")
    if final.exists():  # a resumed run's earlier recommend phase: replaced
        shutil.rmtree(final)
    base.rename(final)
    recorded(final, {"recommending_until": {  # the gate, also where it added nothing: --reuse-base checks it
        "until": list(args.recommending_until) if args.recommending_until else None, "extra_steps": extra}})
    return final


def recorded(folder: Path, record: dict[str, Any], under: str | None = None) -> None:
    """Add `record` to the base card in `folder` (under the key `under`, or at its top)."""
    from shopdistill_assets.training.arena_base import CARD

    card = json.loads((folder / CARD).read_text())
    (card[under] if under else card).update(record)
    (folder / CARD).write_text(json.dumps(card, indent=2) + "\n")


def recommended_until(args: argparse.Namespace, home: Path, base: Path, card: dict[str, Any],
                      again: Callable[[Path, Path, int, int, str], dict[str, Any]]) -> tuple[Path, int]:
    """--recommending-until: part 1 again, CHUNK steps at a time on the model it left (each its own
    folder, seed and warmup), while the kept-back whole id is below SHARE and the extra steps, with the
    pick's extra steps (its card) counted in, stay within MOST. Each further chunk's card records the
    gate (`until`); returns the folder of the last chunk and the extra steps."""
    from shopdistill_assets.training.arena_base import CARD

    share, chunk, most = args.recommending_until
    picked = phase_folder(args, home, "-picking") / CARD
    spent = sum(p["steps"] for p in json.loads(picked.read_text())["picking"]["phases"] if p.get("extra")) \
        if args.picking and picked.is_file() else 0
    extra = 0
    while card["kept_back"]["whole_id_right_after"] < share and spent + extra + chunk <= most:
        extra += chunk
        out = phase_folder(args, home, f"-recommending-part1-more{extra}")
        card = again(base, out, chunk, args.seed + extra, f"{extra} more steps: whole id under {share}")
        recorded(out, {"until": {"share": share, "chunk": chunk, "most": most, "pick_extra_steps": spent,
                                 "extra_steps": extra}}, under="recommending")
        base = out
    return base, extra


def recommending_part(args: argparse.Namespace, base: Path, out: Path, part: dict[str, Any], conversations: list,
                      searches: list, sources: dict[str, Any], label: str, seed: int) -> dict[str, Any]:
    """One part of the recommend phase, and its log lines; its card record."""
    from shopdistill_assets.training.arena_base import learn_recommending

    card = learn_recommending(base, conversations, out, steps=part["steps"], batch=args.recommending_batch,
                              lr=part["lr"], max_length=args.max_length, seed=seed,
                              searches=searches if part["searches"] else None, rename_ids=part["rename_ids"],
                              rename_words=part["rename_words"], sources=sources,
                              measure_steps=args.recommending_measure_steps,
                              log=lambda line: print(f"   {line}", flush=True))
    kept = card["kept_back"]
    print(f"   recommending{label}: {card['steps']} steps x {card['batch']} at {card['learning_rate']}, "
          f"{card['steps_learned_from']} steps of {card['problems']} train-side problems, {card['tokens']:,} tokens, "
          f"loss {card['first_loss']} -> {card['final_loss']}; on {kept['steps']} kept-back steps ({kept['ids']} ids) "
          f"first token right {kept['first_token_right_before']} -> {kept['first_token_right_after']}, whole id "
          f"{kept['whole_id_right_before']} -> {kept['whole_id_right_after']} (by piece {kept.get('pieces_right_after')}), "
          f"{card['seconds']:.0f} s" + renamed_note(card.get("renamed_ids")), flush=True)
    if "searching" in card:
        search, kept = card["searching"], card["searching"]["kept_back"]
        print(f"   searching{label}: {search['steps_learned_from']} find_product steps, {search['tokens']:,} tokens, "
              f"loss {search['first_loss']} -> {search['final_loss']}; on {kept['steps']} kept-back steps "
              f"({kept['values']} values) first token right {kept['first_token_right_before']} -> "
              f"{kept['first_token_right_after']}, whole value {kept['whole_value_right_before']} -> "
              f"{kept['whole_value_right_after']}" + renamed_note(search.get("renamed_words"), "words"), flush=True)
    return card


def train(resources: dict, names: list[str], ops: dict[str, Any]) -> dict[str, Any]:
    from shopdistill_assets.cli.runner import materialize_unpartitioned

    meta = _checked(materialize_unpartitioned(resources, names, ops={k: v for k, v in ops.items() if k in names}),
                    "+".join(names))
    stage = meta.get(names[-1], {})
    print(f"   {names[-1]}: {stage.get('status')} {stage.get('version')} on {stage.get('dataset')} "
          f"({stage.get('dataset_rows')} rows), {stage.get('steps')} steps, loss {stage.get('first_loss')} -> "
          f"{stage.get('final_loss')}, {stage.get('tokens_per_s')} tokens/s", flush=True)
    return meta


def resources_for(home: Path) -> dict:
    from resources.checkpoints import CheckpointStoreResource
    from resources.lake import LakeResource
    from resources.launcher import TrainingLauncher
    from shopdistill_assets import settings
    from shopdistill_assets.definitions import build_resources

    res = build_resources(firehose_root=str(home / "arena" / "firehose"), lake_root=str(home / "lake"))
    # resolved here, not EnvVar: this script reads the lake and the store directly, not only through runs
    roots = settings.resolve_roots()
    res["lake"] = LakeResource(root=roots.lake)
    res["checkpoints"] = CheckpointStoreResource(root=roots.checkpoints, base_model=roots.base_model)
    res["launcher"] = TrainingLauncher(deepspeed_config="zero2", echo_output=False, work_dir=str(home / "train-runs"))
    return res


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    home = Path(args.out).resolve()
    if home.exists() and not args.reuse_base:
        shutil.rmtree(home)
    os.environ.update(SHOPDISTILL_HOME=str(home), TOKENIZERS_PARALLELISM="false")
    for name in ("SHOPDISTILL_BASE_MODEL", "SHOPDISTILL_CHECKPOINTS", "SHOPDISTILL_LAKE", "SHOPDISTILL_FIREHOSE"):
        os.environ.pop(name, None)  # everything under --out
    if args.copies_only:
        return measure_copies(args, home)
    started = datetime.now(UTC)
    command = "python benchmarks/distill.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    from shopdistill_assets.cli.commands import CORPUS_ASSETS
    from shopdistill_assets.cli.runner import materialize_days, materialize_unpartitioned
    from shopdistill_assets.sim import ArenaConfig, simulate

    if args.reuse_base:
        lake = resources_for(home)["lake"]
        gated, base = reused_base(args, home, lake)
        resources = resources_for(home)  # after SHOPDISTILL_BASE_MODEL names the base, as below
        return after_base(args, resources, resources["lake"], gated, base, home, command, started)
    start = date(2026, 11, 1)
    days = [(start + timedelta(days=d)).isoformat() for d in range(args.days)]
    with phase("simulate the arena"):
        summary = simulate(ArenaConfig(out=home / "arena", start_day=start, days=args.days, seed=args.seed,
                                       traces_per_day=args.traces_per_day, problems_per_day=args.problems_per_day))
        print(f"   {summary['products']} products, {summary['latent_problems']} latent problems, "
              f"{sum(d['lines'] for d in summary['days'])} lines over {len(days)} days")
    resources = resources_for(home)
    lake = resources["lake"]
    with phase("corpus path and leak split"):
        for run in materialize_days(resources, CORPUS_ASSETS, days,
                                    ops={"leak_clusters": {"heldout_share": args.heldout_share}}):
            _checked(run, f"corpus {run.day}")
        snap = _checked(materialize_unpartitioned(resources, ["train_corpus", "heldout_eval_set"]), "snapshots")
        gated, heldout = snap["train_corpus"]["version"], snap["heldout_eval_set"]
        print(f"   train_corpus {gated}: {snap['train_corpus']['dagster/row_count']} traces; heldout_eval_set "
              f"{heldout['version']}: {heldout['dagster/row_count']} problems")
    with phase("base model and tokenizer"):
        base = build_base_model(args, lake, gated, home)
        resources = resources_for(home)
        print(f"   {base}")
    return after_base(args, resources, lake, gated, base, home, command, started)


def base_folder(args: argparse.Namespace, home: Path, before: str | None = None) -> Path:
    """The folder of the last base phase the flags name, or of the last one before the phase whose
    folder ends with `before`."""
    named = [suffix for suffix, on in (("-random", True), ("", bool(args.pretrain_steps)), ("-picking", args.picking),
                                       ("-recommending", bool(args.recommending_steps))) if on]
    return phase_folder(args, home, named[named.index(before) - 1] if before else named[-1])


def phase_folder(args: argparse.Namespace, home: Path, suffix: str) -> Path:
    """Where a base phase saves its model: `-random`, `` (the reading), `-picking`, `-recommending`."""
    return home / "models" / f"qwen3-{args.size}{suffix}"


def gated_versions(lake: Any) -> list[str]:
    """The run's train_corpus snapshots built from split_traces (the gated corpus; the ablation's is
    built from normalized_traces)."""
    return [v for v in lake.list_snapshots("train_corpus")
            if str(lake.read_manifest("train_corpus", v).get("source", "")).startswith("split_traces")]


def reused_base(args: argparse.Namespace, home: Path, lake: Any) -> tuple[str, Path]:
    """(the gated train_corpus version, the base) of the run in `home` (`--reuse-base`): the newest
    snapshot built from split_traces, and the folder of the last base phase the flags name. When
    only the recommend phase is missing (a run resumed with other recommend flags, its folder
    removed), it is built on the phase before it."""
    if args.base_model:
        raise SystemExit("--reuse-base rebuilds nothing: give the base with --base-model on a fresh run instead")
    gated = gated_versions(lake)
    gates_as_flags(args, home)
    base = base_folder(args, home)
    before = base_folder(args, home, before="-recommending") if args.recommending_steps else base
    if len(gated) != 1 or not (before / "config.json").is_file():
        raise SystemExit(f"--reuse-base: {home} needs one gated train_corpus (has {gated}) and a base at {base}")
    if not (base / "config.json").is_file():  # the phases before it were built: the recommend phase is missing
        with phase(f"the base's recommend phase, on the reused {before.name}"):
            recommending_base(args, before, lake, home)
    from shopdistill_assets.training.tiny_model import markup_as_text

    if markup_as_text(base):  # built before the tool-call markers were text: Dr. GRPO's rewards would all be 0
        print(f"   {base.name}: tokenizer re-saved with <tool_call>, <think> and the like as text, ids unchanged",
              flush=True)
    print(f"== reusing the base {base} and train_corpus {gated[0]} of {home}", flush=True)
    os.environ["SHOPDISTILL_BASE_MODEL"] = str(base)
    return gated[0], base


def gates_as_flags(args: argparse.Namespace, home: Path) -> None:
    """`--reuse-base` finds a base phase by its folder, which `--picking-until` and
    `--recommending-until` do not name: a saved pick or recommend base whose card records another gate
    (or none where the flag asks for one) stops the run rather than being taken as the flags' base."""
    from shopdistill_assets.training.arena_base import CARD

    def flag(until: list | None) -> str:
        return " ".join(map(str, until)) if until else "(off)"

    for on, suffix, name, saved_at, wanted in (
            (args.picking, "-picking", "--picking-until", lambda card: card.get("picking", {}).get("until"),
             args.picking_until),
            (bool(args.recommending_steps), "-recommending", "--recommending-until",
             lambda card: card.get("recommending_until", {}).get("until"), args.recommending_until)):
        card = phase_folder(args, home, suffix) / CARD
        if not on or not card.is_file():
            continue
        saved, wanted = saved_at(json.loads(card.read_text())), list(wanted) if wanted else None
        if saved != wanted:
            raise SystemExit(f"--reuse-base: the base in {card.parent} was built with {name} {flag(saved)}, not "
                             f"{flag(wanted)}: give the flags that built it")


def after_base(args: argparse.Namespace, resources: dict, lake: Any, gated: str, base: Path | str, home: Path,
               command: str, started: datetime) -> int:
    """The stages, the held-out evaluation, the step match and the report."""
    from shopdistill_assets.agent.policies_registry import PolicySpec, register
    from shopdistill_assets.cli.runner import materialize_policies

    results = run_training(args, resources, lake, gated, base)
    policies = ["fair", "base", "sft_unfiltered", *CHAIN]
    register(PolicySpec(name="fair", scripted="fair"))
    with phase("held-out evaluation"):
        evals = materialize_policies(resources, policies, ops={"policy_eval": {
            "samples": args.eval_samples, "limit": args.eval_limit, "max_steps": 10, "concurrency": 8,
            "batch_size": 8, "max_new_tokens": args.max_new_tokens, **DEADLINES}}, workers=args.eval_workers)
        for run in evals:
            m = _checked(run, f"policy_eval {run.day}").get("policy_eval", {})
            print(f"   {run.day:<15} ASR {m.get('asr', 0):.3f}  pass@1 {m.get('pass_at_1', 0):.3f}  "
                  f"pass@{args.eval_samples} {m.get(f'pass_at_{args.eval_samples}', 0):.3f}", flush=True)
    step_matches = measure_step_match(args, lake, policies, home) if args.step_match else {}
    return report(args, resources, lake, policies, results, command, started, step_matches)


def measure_copies(args: argparse.Namespace, home: Path) -> int:
    """Lever 1 by measurement: one simulated day normalized (no Dagster), its successful rows
    split in two; each tokenizer is trained on one half and measured on the other."""
    import gzip

    from shopdistill_assets.corpus.normalize import normalize_lines
    from shopdistill_assets.sandbox.catalog import iter_documents
    from shopdistill_assets.sim import ArenaConfig, simulate
    from shopdistill_assets.training.tiny_model import (
        build_arena_tokenizer,
        fixed_prompt_pieces,
        loss_copy_share,
        render_conversations,
    )

    simulate(ArenaConfig(out=home / "arena", start_day=date(2026, 11, 1), days=1, seed=args.seed,
                         traces_per_day=600, problems_per_day=args.problems_per_day))
    lines = [(path.name, n, line) for path in sorted((home / "arena" / "firehose").glob("day=*/part-[0-9]*.jsonl.gz"))
             for n, line in enumerate(gzip.open(path).read().splitlines(), 1)]
    rows = [r for r in normalize_lines(lines, "2026-11-01")[0] if (r.get("score") or 0) >= 1]
    fit, measured = render_conversations(rows[0::2]), render_conversations(rows[1::2])[1:]
    products = list(iter_documents(home / "arena" / "catalog" / "documents.jsonl.gz"))
    ids = sorted({str(p["product_id"]) for p in products} | {str(p["shop_id"]) for p in products if p.get("shop_id")})
    print(f"{len(rows)} successful rows; fit on {len(fit) - 1}, measured on {len(measured)}")
    print("tokenizer                  loss copies  tool-call copies  tokens a row")
    for identity in (False, True):
        for whole_ids in (False, True):
            tokenizer = build_arena_tokenizer(fit, args.vocab, identity=identity,
                                              whole_pieces=[*fixed_prompt_pieces(), *(ids if whole_ids else [])])
            m = loss_copy_share(tokenizer, measured)
            name = f"{'identity' if identity else 'arena BPE'}{', whole ids' if whole_ids else ''}"
            print(f"{name:<26} {100 * m['copies']:>10.1f}% {100 * m['call_copies']:>15.1f}% "
                  f"{m['tokens_per_conversation']:>13.0f}", flush=True)
    return 0


def measure_step_match(args: argparse.Namespace, lake: Any, policies: list[str], home: Path) -> dict[str, dict]:
    """Each policy's next call after every prefix of the fair policy's trajectory on the held-out
    problems policy_eval evaluated (the newest heldout_eval_set, the same limit)."""
    from shopdistill_assets.agent.policies_registry import lookup
    from shopdistill_assets.evaluation.assets import heldout_version, weights_sha256
    from shopdistill_assets.evaluation.step_match import chat_policy, step_match, teacher_steps
    from shopdistill_assets.sandbox import load_catalog
    from shopdistill_assets.split.heldout import HELDOUT_ASSET, rows_to_problems

    out = {}
    with phase("step match on the fair policy's held-out trajectories"):
        version = heldout_version(lake)
        limit = args.step_match_limit or args.eval_limit
        problems = rows_to_problems(lake.read_snapshot(HELDOUT_ASSET, version).to_dicts())[:limit]
        catalog = load_catalog(home / "arena" / "catalog")
        steps = {p.problem_id: teacher_steps(p, catalog) for p in problems}
        measured: dict[str, str] = {}  # weights sha -> the policy measured with them (greedy: the same answers)
        for policy in policies:
            spec = lookup(policy)
            weights = weights_sha256(spec)
            if weights in measured:
                out[policy] = {**out[measured[weights]], "reused_from": measured[weights]}
                print(f"   {policy:<15} step match {out[policy]['step_match']:.3f}: the weights of "
                      f"{measured[weights]}, not measured again", flush=True)
                continue
            chat = chat_policy(spec, problems, catalog, max_new_tokens=args.max_new_tokens, batch_size=8)
            out[policy] = step_match(chat, problems, catalog, steps_by_problem=steps, concurrency=8)
            if weights:
                measured[weights] = policy
            recommended = out[policy]["by_tool"].get("recommend_product") or {}
            print(f"   {policy:<15} step match {out[policy]['step_match']:.3f} over {out[policy]['steps']} steps "
                  f"({out[policy]['policy_errors']} errors); the fair policy's ids recommended at "
                  f"{recommended.get('exact', 0.0):.3f} of {recommended.get('steps', 0)} recommendations", flush=True)
    return out


def run_training(args: argparse.Namespace, resources: dict, lake: Any, gated: str, base: Path | str) -> dict[str, Any]:
    """The ablation's sft, then the five stages; returns {policy: corpus source} for the report."""
    from transformers import AutoTokenizer

    from shopdistill_assets.agent.policies_registry import PolicySpec, register
    from shopdistill_assets.cli.runner import materialize_unpartitioned
    from shopdistill_assets.training.stages import STAGES

    store = resources["checkpoints"].store()
    sft = {"only_successful": True}
    with phase("ablation: sft on every normalized trace (no structural filter, no gates)"):
        meta = _checked(materialize_unpartitioned(resources, ["train_corpus"], ops={"train_corpus": {
            "source": "normalized_traces"}}), "unfiltered train_corpus")["train_corpus"]
        unfiltered = meta["version"]
        tokenizer = AutoTokenizer.from_pretrained(base)
        per_row = {v: mean_tokens(lake.read_snapshot("train_corpus", v).to_dicts(), tokenizer, args.max_length)
                   for v in (gated, unfiltered)}
        steps = max(1, round(args.sft_steps * per_row[gated] / per_row[unfiltered]))  # the same token budget
        print(f"   train_corpus {unfiltered}: {meta['dagster/row_count']} traces; successful rows average "
              f"{per_row[unfiltered]:.0f} tokens (gated: {per_row[gated]:.0f}) -> {steps} steps")
        ref = train(resources, ["sft_checkpoint"], {"sft_checkpoint": stage_ops(args, steps, args.sft_lr, **sft)})
        ablation = store.get("sft", ref["sft_checkpoint"]["version"])
        register(PolicySpec(name="sft_unfiltered", checkpoint=str(store.local_path(ablation))))
    with phase("sft on the gated corpus"):
        _checked(materialize_unpartitioned(resources, ["train_corpus"]), "train_corpus")  # the newest again
        train(resources, ["sft_checkpoint"], {"sft_checkpoint": stage_ops(args, args.sft_steps, args.sft_lr, **sft)})
    rollouts = {"max_steps": 10, "max_new_tokens": args.max_new_tokens, "batch_size": 8, "concurrency": 8, **DEADLINES}
    ops = {
        "train_problems": {"limit": args.rollout_problems},
        "train_rollouts": {**rollouts, "samples": args.rollout_samples, "temperature": 0.7},
        "teacher_rollouts": {**rollouts, "samples": 1, "scripted": "fair"},
        "kto_dataset": {"max_steps_per_trace": 2, "max_rows": 400},
        "resft_checkpoint": stage_ops(args, args.resft_steps, args.later_lr),
        "teacher_sft_checkpoint": stage_ops(args, args.teacher_steps, args.later_lr),
        "kto_checkpoint": stage_ops(args, args.kto_steps, args.kto_lr, sft=False, beta=args.kto_beta,
                                   per_device_train_batch_size=max(2, args.batch)),  # KTO's KL term needs 2
        "dr_grpo_checkpoint": {"max_steps": args.grpo_steps, "learning_rate": args.grpo_lr, "num_generations": 4,
                               "per_device_train_batch_size": 8, "max_completion_length": args.max_new_tokens,
                               "trainer_json": json.dumps({"logging_steps": 1, "gradient_checkpointing": False})},
    }
    for name in CHAIN[1:]:
        stage = STAGES[name]
        with phase(f"{name} ({stage.method} on {stage.dataset})"):
            train(resources, [*stage.rollouts, stage.asset], ops)
    return {"sft_unfiltered": "normalized_traces", **{s: "split_traces" for s in CHAIN}}


def base_note(args: argparse.Namespace, checkpoint: str | None) -> str:
    """What the base is: given, random, or random then pretrained on arena text (its card)."""
    if args.base_model:
        return f"given ({checkpoint})"
    from shopdistill_assets.training.arena_base import CARD

    card = Path(checkpoint or "") / CARD
    if not card.is_file():
        return f"random init ({Path(checkpoint or '').name})"
    read = json.loads(card.read_text())
    parts = ["random init"]
    if "steps" in read:
        parts.append(f"{read['steps']} steps ({read['tokens']:,} tokens) of arena text, loss on every token")
    if "picking" in read:
        phases = read["picking"]["phases"]
        steps = ", ".join(f"{p['pages']} page(s): {p['steps']} steps" for p in phases)
        parts.append(f"picking ({steps}; first token right {phases[-1]['first_token_right']}"
                     f"{_whole(phases[-1].get('whole_id_right'))})")
    if "recommending" in read:
        r, kept = read["recommending"], read["recommending"]["kept_back"]
        renamed = f"; ids of {r['renamed_ids']['share']} of the rows renamed each draw" if "renamed_ids" in r else ""
        earlier = read.get("recommending_earlier", [])
        after = f" after {len(earlier)} earlier part(s): {'; '.join(map(_part_note, earlier))}" if earlier else ""
        parts.append(f"recommend steps of {r['problems']} train-side problems ({r['steps']} steps x {r['batch']}; "
                     f"first token right on kept-back ones {kept['first_token_right_after']}"
                     f"{_whole(kept.get('whole_id_right_after'))}{renamed}{after})")
    if "searching" in read.get("recommending", {}):
        search = read["recommending"]["searching"]
        renamed = (f"; words of {search['renamed_words']['share']} of the rows renamed each draw"
                   if "renamed_words" in search else "")
        parts.append(f"search steps of the same problems ({search['steps_learned_from']} rows; whole argument value "
                     f"right on kept-back ones {search['kept_back']['whole_value_right_after']}{renamed})")
    return f"{' + '.join(parts)} ({Path(checkpoint or '').name}/{CARD})"


def _recommending_phase(args: argparse.Namespace) -> str:
    parts = len(recommend_parts(args))
    return "" if not parts else "recommending" if parts == 1 else f"recommending in {parts} parts"


def _part_note(record: dict[str, Any]) -> str:
    """An earlier part of the recommend phase, from its card record."""
    search = record.get("searching", {})
    renamed = [f"{what} of {renaming['share']}" for what, renaming in
               (("ids", record.get("renamed_ids")), ("words", search.get("renamed_words"))) if renaming]
    return (f"{record['steps']} steps x {record['batch']} at {record['learning_rate']}"
            + (f" with {search['steps_learned_from']} search rows" if search else "")
            + (f", {' and '.join(renamed)} of the rows renamed" if renamed else "")
            + (f" (part 1 again: whole id under {record['until']['share']})" if "until" in record else ""))


def sampling_note(base: str | None) -> str:
    """How the episodes were sampled: the rollout's temperature, the base checkpoint's own top_p / top_k
    (its generation_config.json, which every stage's checkpoint carries on; hf_policy.HFPolicy.sampling)."""
    from transformers import GenerationConfig

    from shopdistill_assets.agent.rollout import RolloutConfig

    try:
        config = GenerationConfig.from_pretrained(base) if base else None
    except OSError:  # a base saved without generation_config.json samples untruncated
        config = None
    top_p, top_k = getattr(config, "top_p", None), getattr(config, "top_k", None)
    cut = (f"top_p {top_p}, top_k {top_k} (the base's generation_config.json)" if top_p or top_k else
           "no top_p / top_k (the base's generation_config.json names none)")
    return f"Episodes sampled at temperature {RolloutConfig.temperature}, {cut}; step match greedy."


def _whole(share: float | None) -> str:
    return "" if share is None else f", whole id {share}"  # cards before the whole-id measure have none


def report(args: argparse.Namespace, resources: dict, lake: Any, policies: list[str], sources: dict[str, str],
           command: str, started: datetime, step_matches: dict[str, dict] | None = None) -> int:
    from shopdistill_assets.agent.policies_registry import lookup
    from shopdistill_assets.evaluation import distill_report

    store = resources["checkpoints"].store()
    heldout = {}
    rows = []
    for policy in policies:
        snapshot = max((s for s in lake.list_snapshots("policy_eval") if s.startswith(f"{policy}__")),
                       key=lambda s: lake.read_manifest("policy_eval", s).get("summary", {}).get("eval_run_id", ""))
        manifest = lake.read_manifest("policy_eval", snapshot)
        heldout = manifest["heldout_version"]
        spec = lookup(policy)
        lineage = store.lineage(store.resolve(spec.checkpoint)) if spec.checkpoint and policy != "base" else None
        note = {"fair": "scripted, no ground truth (ceiling)", "base": base_note(args, spec.checkpoint)}
        rows.append(distill_report.row(policy, manifest["summary"], lineage, sources.get(policy), note.get(policy, ""),
                                       (step_matches or {}).get(policy)))
    goals = distill_report.targets(rows, ["base", *CHAIN])
    total_wall = sum(t[1] for t in TIMES)
    total_cpu = sum(t[2] for t in TIMES)
    phases = [f"{args.pretrain_steps} steps of arena text" if args.pretrain_steps else "",
              "picking" if args.picking else "", _recommending_phase(args)]
    base = f"`{args.base_model}`" if args.base_model else \
        f"Qwen3 `{args.size}` ({', then '.join(['random init', *filter(None, phases)])})"
    header = (f"# Distillation on the simulated arena\n\nCommand: `{command}`\n\nRun {started.isoformat(timespec='seconds')}"
              f", held-out set `{heldout}` ({rows[0]['problems']} problems x {args.eval_samples} samples), base model "
              f"{base}; wall {total_wall / 60:.1f} min, CPU {total_cpu / 60:.1f} min "
              f"(~{total_cpu / 120:.1f} min on two quiet cores). {sampling_note(lookup('base').checkpoint)}\n")
    folder = Path(store.root) / "reports" / f"distill-{started.strftime('%Y%m%dT%H%M%S')}"
    paths = distill_report.write(rows, folder, header, goals, {
        "command": command, "args": vars(args), "phases": [{"phase": n, "wall_s": round(w, 1), "cpu_s": round(c, 1)}
                                                          for n, w, c in TIMES]})
    print("\n" + paths["markdown"].read_text())
    print("phase                                                      wall s    CPU s")
    for name, wall, cpu in TIMES:
        print(f"{name[:56]:<56} {wall:>8.0f} {cpu:>8.0f}")
    print(f"\nreport: {paths['markdown']}\n        {paths['png']}\n        {paths['json']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
