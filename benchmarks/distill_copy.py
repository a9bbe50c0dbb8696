"""Can a small random Qwen3 copy product ids? Issue 20's levers 1, 3b and 4, measured before any full run.

    python benchmarks/distill_copy.py [--arena DIR] [--steps 1000] [--pretrain-steps 500]
                                      [--variants whole frozen identity identity+pre]

Variants, trained side by side in one process (one step each in turn, on the same rows, so the
machine's load falls on all of them alike), plain torch, loss on the assistant turns:
  whole         catalogue ids one token each (whole pieces), embeddings trained
  frozen        whole ids with fixed, distinct embeddings (a shared id direction plus a random one
                each; their rows get no gradient; the checkpoint stays a standard Qwen3)
  identity      identity tokens (tiny_model.IDENTITY_SPLIT): an id is digit groups of three
  +keys         the JSON right before an id one token each (tiny_model.ID_KEY_PIECES): the first
                result's id follows its own token
  +pre          any of them after `--pretrain-steps` steps on catalogue browsing transcripts
                (training/arena_base.py, loss on every token) before the SFT rows
  +ind          first `--induction-steps` steps on repeated random tokens (arena_base.induction_batch:
                16 rows of 64 tokens written twice, loss on the second half), before +pre and the rows
Measured on held-out problems' successful rows, at every id a tool call writes (teacher forced):
the mean log-probability of the id's tokens, top-1 per token, the probability mass on ids shown
earlier in the context (whole ids), and per id: its first token right (which result to copy) and
all its tokens right (the copy).
"""

from __future__ import annotations

import argparse
import gzip
import random
import re
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ID = re.compile(r"\d{7,12}")
TURN = re.compile(r"<\|im_start\|>assistant\n(.*?)<\|im_end\|>", re.S)
CALL = re.compile(r"<tool_call>.*?</tool_call>", re.S)
SHAPE = {"hidden": 128, "layers": 4, "heads": 4, "kv_heads": 2, "mlp": 512}  # tiny_model.SMALL_SIZES["h128l4"]


def successful_rows(arena: Path) -> list[dict]:
    from shopdistill_assets.corpus.normalize import normalize_lines

    rows = []
    for path in sorted(arena.glob("firehose/day=*/part-[0-9]*.jsonl.gz")):
        day = path.parent.name.removeprefix("day=")
        lines = [(path.name, n, line) for n, line in enumerate(gzip.open(path).read().splitlines(), 1)]
        rows += [r for r in normalize_lines(lines, day)[0] if (r.get("score") or 0) >= 1]
    return rows


def encode(tokenizer, text: str, max_length: int, loss_everywhere: bool = False):
    """(ids, loss mask, ids written by tool calls as lists of token positions)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"][:max_length], enc["offset_mapping"][:max_length]
    turns = [(m.start(1), m.end(1) + len("<|im_end|>")) for m in TURN.finditer(text)]
    loss = [loss_everywhere or any(a <= s < b for a, b in turns) for s, _ in offsets]
    spans = [(m.start(), m.end()) for c in CALL.finditer(text) for m in ID.finditer(text, c.start(), c.end())]
    written = [[i for i, (s, _) in enumerate(offsets) if a <= s < b and loss[i]] for a, b in spans]
    return ids, loss, [w for w in written if w]


class Variant:
    def __init__(self, name: str, train_texts: list[str], eval_texts: list[str], pre_texts: list[str],
                 catalogue_ids: list[str], max_length: int, lr: float, induction_steps: int = 0):
        import torch
        from transformers import Qwen3Config, Qwen3ForCausalLM

        from shopdistill_assets.training.tiny_model import ID_KEY_PIECES, build_arena_tokenizer, fixed_prompt_pieces

        self.name, self.lr, self.tokens, self.cpu = name, lr, 0, 0.0
        kind = name.split("+")[0]
        whole_ids = kind in ("whole", "frozen")
        pieces = [*fixed_prompt_pieces(), *(catalogue_ids if whole_ids else [])]
        self.tokenizer = build_arena_tokenizer(train_texts[:: max(1, len(train_texts) // 400)], 4096,
                                               whole_pieces=pieces, identity=kind == "identity",
                                               key_pieces=ID_KEY_PIECES if "+keys" in name else ())
        torch.manual_seed(0)
        self.model = Qwen3ForCausalLM(Qwen3Config(
            vocab_size=len(self.tokenizer), hidden_size=SHAPE["hidden"], intermediate_size=SHAPE["mlp"],
            num_hidden_layers=SHAPE["layers"], num_attention_heads=SHAPE["heads"],
            num_key_value_heads=SHAPE["kv_heads"], head_dim=SHAPE["hidden"] // SHAPE["heads"],
            max_position_embeddings=max_length, tie_word_embeddings=True))
        self.id_rows = None
        if whole_ids:
            self.id_rows = sorted({self.tokenizer.convert_tokens_to_ids(i) for i in catalogue_ids} - {None})
        if kind == "frozen":
            self._freeze_ids()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
        self.pre = [encode(self.tokenizer, t, max_length, True) for t in pre_texts] if "+pre" in name else []
        self.induction = induction_steps if "+ind" in name else 0
        self.generator = torch.Generator().manual_seed(2)
        self.train = [encode(self.tokenizer, t, max_length) for t in train_texts]
        self.eval = [encode(self.tokenizer, t, max_length) for t in eval_texts]

    def _freeze_ids(self) -> None:
        import torch

        weight = self.model.model.embed_tokens.weight  # tied: the output rows too
        rows = torch.tensor(self.id_rows)
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            shared = torch.randn(weight.shape[1], generator=g)
            distinct = torch.randn(len(rows), weight.shape[1], generator=g)
            fixed = 0.5 * shared / shared.norm() + distinct / distinct.norm(dim=1, keepdim=True)
            weight[rows] = fixed * weight.norm(dim=1).mean()
        keep = torch.ones(weight.shape[0], 1)
        keep[rows] = 0
        weight.register_hook(lambda grad: grad * keep)

    def step(self, i: int, step: int, steps: int) -> float:
        import torch

        from shopdistill_assets.training.arena_base import induction_batch, lr_scale

        started = time.process_time()
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr * lr_scale(step, steps, 50)
        if step <= self.induction:
            x = induction_batch(self.tokenizer, self.generator)
            half = x.shape[1] // 2
            logits = self.model(input_ids=x).logits[:, half:-1]
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, half + 1:].reshape(-1))
            return self._update(loss, x.numel(), started)
        step -= self.induction
        ids, loss_mask, _ = self.pre[step - 1] if step <= len(self.pre) else self.train[i]
        x = torch.tensor([ids])
        hidden = self.model.model(input_ids=x).last_hidden_state[0, :-1]
        at = torch.tensor(loss_mask[1:]).nonzero().squeeze(1)  # logits only where the loss is
        loss = torch.nn.functional.cross_entropy(self.model.lm_head(hidden[at]), x[0, 1:][at])
        return self._update(loss, len(ids), started)

    def _update(self, loss, tokens: int, started: float) -> float:
        import torch

        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.tokens += tokens
        self.cpu += time.process_time() - started
        return loss.item()

    def measure(self) -> dict[str, float]:
        import torch

        self.model.eval()
        logp_sum = hits = tokens = first = exact = ids_n = 0
        shown = 0.0
        id_rows = set(self.id_rows or ())
        with torch.no_grad():
            for ids, _, written in self.eval:
                if not written:
                    continue
                logits = self.model(input_ids=torch.tensor([ids])).logits[0]
                logp = torch.log_softmax(logits, -1)
                for positions in written:
                    right = []
                    for p in positions:
                        logp_sum += float(logp[p - 1, ids[p]])
                        right.append(int(logp[p - 1].argmax()) == ids[p])
                        tokens += 1
                        if id_rows:
                            context = sorted(set(ids[:p]) & id_rows)
                            shown += float(logp[p - 1, context].exp().sum()) if context else 0.0
                    hits += sum(right)
                    ids_n += 1
                    first += right[0]
                    exact += all(right)
        self.model.train()
        return {"logp": logp_sum / max(tokens, 1), "top1": hits / max(tokens, 1), "shown_mass": shown / max(tokens, 1),
                "first": first / max(ids_n, 1), "exact": exact / max(ids_n, 1), "ids": ids_n}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arena", type=Path, default=None, help="a simulated arena (default: simulate 3 days, seed 5)")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--pretrain-steps", type=int, default=500, help="browsing steps of the +pre variants (within --steps)")
    p.add_argument("--variants", nargs="+", default=["whole", "frozen", "identity", "identity+pre"])
    p.add_argument("--induction-steps", type=int, default=300, help="repeated-random-token steps of the +ind "
                   "variants (within --steps)")
    p.add_argument("--max-length", type=int, default=4096)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--eval-rows", type=int, default=60)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    import torch

    from shopdistill_assets.sandbox.catalog import iter_documents
    from shopdistill_assets.sim import ArenaConfig, simulate
    from shopdistill_assets.training.arena_base import browsing_texts
    from shopdistill_assets.training.tiny_model import build_tokenizer, render_conversations

    torch.set_num_threads(args.threads)
    arena = args.arena
    if arena is None:
        arena = Path(tempfile.mkdtemp(prefix="distill-copy-")) / "arena"
        simulate(ArenaConfig(out=arena, start_day=date(2026, 11, 1), days=3, seed=5, traces_per_day=1500))
    rows = successful_rows(arena)
    problems = sorted({r["problem_id"] for r in rows})
    random.Random(0).shuffle(problems)
    held = set(problems[: len(problems) // 10])  # problems whose rows are only measured, never trained on
    train_texts = render_conversations([r for r in rows if r["problem_id"] not in held])[1:]
    eval_texts = render_conversations([r for r in rows if r["problem_id"] in held][: args.eval_rows])[1:]
    products = list(iter_documents(arena / "catalog" / "documents.jsonl.gz"))
    catalogue_ids = sorted({str(x["product_id"]) for x in products} | {str(x["shop_id"]) for x in products if x.get("shop_id")})
    pre_texts = browsing_texts(arena / "catalog", args.pretrain_steps, 3, build_tokenizer(vocab_size=300))
    print(f"{len(train_texts)} successful train rows, {len(eval_texts)} held-out rows measured; shape {SHAPE}", flush=True)
    variants = [Variant(v, train_texts, eval_texts, pre_texts, catalogue_ids, args.max_length, args.lr,
                        args.induction_steps) for v in args.variants]
    rng = random.Random(1)
    every = max(1, args.steps // 8)
    print("step  variant        loss  tokens  tok/CPU-s  id logp  top1  shown-mass  first  exact (ids)")
    for step in range(1, args.steps + 1):
        i = rng.randrange(len(train_texts))
        losses = [v.step(i, step, args.steps) for v in variants]
        if step % every == 0 or step == args.steps:
            for v, loss in zip(variants, losses):
                m = v.measure()
                print(f"{step:>5} {v.name:<14} {loss:5.2f} {v.tokens / 1e6:5.2f}M {v.tokens / max(v.cpu, 1e-9):>8.0f} "
                      f"{m['logp']:>8.2f} {m['top1']:.3f} {m['shown_mass']:>10.3f} {m['first']:.3f} {m['exact']:.3f} "
                      f"({m['ids']})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
