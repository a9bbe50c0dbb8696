"""Can the small Qwen3 learn to copy the first result's id of the last page it read? Issue 20: no
stage ever wrote the id of a product it was shown (distill_copy.py: the first token of an id right
0.000), while 46 % of the successful rows recommend the first result of the last search.

    python benchmarks/pick_probe.py --base MODEL_DIR --catalog ARENA/catalog [--steps 400]
                                    [--max-results 10] [--pages 4]

MODEL_DIR is a small Qwen3 with its tokenizer (the random base `distill.py` writes under
`OUT/models/qwen3-<size>-random`, or the browsed one beside it). It is trained on picking transcripts
(`training/arena_base.picking_conversation`: searches, each page cut to its first 1..max-results
results, then view_product_information on the first result), `--batch` texts a step, loss on the
assistant turns, AdamW with warmup and cosine, then measured teacher forced on fresh transcripts
(another seed) at every id the view calls write: its first token right (which result), an earlier
page's first id instead (the right choice on the wrong page), every token right (the copy), by the
page's length. Catalogue pages only: no problem, held-out or not, is read. Measured: at lr 2e-3 the
choice never forms; at 5e-4 it does on one page (`--pages 1 --batch 16`), and a `--save`d one-page
model learns 2 and 4 pages (`--base`); results/distill/README.md. `--steps 0 --heldout OUT` measures
a checkpoint of a distill.py run where the pick is used: at the fair policy's recommend_product steps
on that run's held-out problems, teacher forced, in the conversation the evaluation serves, and
the argument values of its find_product calls there (first token, the whole value with its close).
`--recommend-from OUT` trains on the fair policy's recommend steps of OUT's train-side problems
instead of picking transcripts (what `distill.py --recommending-steps` does), measured on the way
with `--heldout OUT`; train side only: a problem the train-side rule does not file there stops it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _benchmark(name: str):
    """A sibling script of benchmarks/ as a module (they are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def transcripts(catalog: Path, n: int, seed: int, tokenizer, pages: int, max_results: int, dense: bool = False) -> list[tuple[str, list[int]]]:
    """(rendered text, page length before each view call) for `n` picking transcripts."""
    from shopdistill_assets.sandbox import load_catalog
    from shopdistill_assets.sandbox.tools import Sandbox
    from shopdistill_assets.training.arena_base import picking_conversation

    products = load_catalog(catalog)
    sandbox = Sandbox(products)
    ordered = sorted(products, key=lambda p: p["product_id"])
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        messages = picking_conversation(ordered, sandbox, rng, pages=pages, max_results=max_results, dense=dense)
        results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
        lengths = [len(r) for r in results if r and "title" in r[0]]  # search pages, not the looks' product pages
        out.append((tokenizer.apply_chat_template(messages, tokenize=False), lengths))
    return out


def heldout_recommendations(home: Path, tokenizer, limit: int) -> list[tuple[str, int]]:
    """(rendered text, the last page's length) at each of the fair policy's
    recommend_product steps on the first `limit` held-out problems of a distill.py run (`--out`):
    the conversation as the evaluation serves it (system prompt, tool schemas, real tool results)
    with the fair policy's call at its end. Measured only, never trained on."""
    from shopdistill_assets.evaluation.step_match import teacher_steps
    from shopdistill_assets.sandbox import load_catalog
    from shopdistill_assets.sandbox.tool_specs import tool_schemas

    problems = heldout_problems(home, limit)
    catalog = load_catalog(home / "arena" / "catalog")
    out = []
    for problem in problems:
        for step in teacher_steps(problem, catalog):
            if step.name != "recommend_product":
                continue
            call = {"id": "call_r", "type": "function", "function": {"name": step.name, "arguments": step.arguments}}
            messages = [*step.prefix, {"role": "assistant", "content": "", "tool_calls": [call]}]
            pages = [json.loads(m["content"]) for m in step.prefix if m["role"] == "tool" and m.get("content")]
            pages = [r for r in pages if isinstance(r, list) and r and "title" in r[0]]
            out.append((tokenizer.apply_chat_template(messages, tools=tool_schemas(), tokenize=False),
                        len(pages[-1]) if pages else 0))
    return out


def heldout_problems(home: Path, limit: int) -> list:
    """The first `limit` problems of the newest held-out split of a distill.py run (`--out`)."""
    from resources.lake import LakeResource
    from shopdistill_assets.evaluation.assets import heldout_version
    from shopdistill_assets.split.heldout import HELDOUT_ASSET, rows_to_problems

    lake = LakeResource(root=str(home / "lake"))
    return rows_to_problems(lake.read_snapshot(HELDOUT_ASSET, heldout_version(lake)).to_dicts())[:limit]


def heldout_searches(home: Path, tokenizer, limit: int, max_length: int) -> list[tuple[list[int], list[list[int]]]]:
    """(token ids, each argument value's positions and its closing token) at each of the fair policy's
    find_product steps on the first `limit` held-out problems of a distill.py run, served as
    evaluated (`arena_base.call_value_positions`, the search rows' loss). Measured only."""
    from shopdistill_assets.evaluation.step_match import teacher_conversations
    from shopdistill_assets.sandbox import load_catalog
    from shopdistill_assets.sandbox.tool_specs import tool_schemas
    from shopdistill_assets.training.arena_base import call_value_positions

    problems = heldout_problems(home, limit)
    rows = [call_value_positions(tokenizer, tokenizer.apply_chat_template(c, tools=tool_schemas(), tokenize=False),
                                 max_length)
            for _, _, c in teacher_conversations(problems, load_catalog(home / "arena" / "catalog"), ("find_product",))]
    return [row for row in rows if row[1]]


def search_report(model, rows) -> None:
    """The held-out searches' argument values, teacher forced: first token, whole value with its close."""
    from shopdistill_assets.training.arena_base import written_right

    right = written_right(model, rows, "value")
    print(f"        search values at the held-out find_product steps: first {right['first_token_right']:.3f}  "
          f"whole {right['whole_value_right']:.3f}  ({sum(len(g) for _, g in rows)} values)", flush=True)


def recommend_row(tokenizer, text: str, max_length: int) -> tuple[list[int], None, list[list[int]]]:
    """A served recommend step as a probe row: (ids, no mask, each recommended id's positions), the
    positions `distill.py --recommending-steps` puts its loss on (arena_base.recommended_id_positions)."""
    from shopdistill_assets.training.arena_base import recommended_id_positions

    ids, groups = recommended_id_positions(tokenizer, text, max_length)
    return ids, None, groups


def train_recommendations(home: Path, tokenizer, max_length: int) -> list:
    """Rows (recommend_row) of the fair policy's recommend_product steps on the TRAIN-side problems
    of a distill.py run (`--out`), served as evaluated (what `distill.py --recommending-steps` trains
    the base on; a problem not on the train side stops it); a step max_length cuts off is left out."""
    from resources.lake import LakeResource
    from shopdistill_assets.evaluation.step_match import recommend_conversations
    from shopdistill_assets.sandbox import load_catalog
    from shopdistill_assets.sandbox.tool_specs import tool_schemas

    _, problems = _benchmark("distill").train_side_problems(LakeResource(root=str(home / "lake")), home)
    rows = [recommend_row(tokenizer, tokenizer.apply_chat_template(conversation, tools=tool_schemas(), tokenize=False),
                          max_length)
            for _, conversation in recommend_conversations(problems, load_catalog(home / "arena" / "catalog"))]
    return [row for row in rows if row[2]]


def fresh_base(args) -> Path:
    import tempfile

    from shopdistill_assets.training.tiny_model import (ID_KEY_PIECES, SMALL_SIZES, _save_qwen3, build_arena_tokenizer,
                                                        build_tokenizer, fixed_prompt_pieces)

    texts = [t for t, _ in transcripts(args.catalog, 300, 10, build_tokenizer(vocab_size=300), args.pages, args.max_results, args.dense)]
    tokenizer = build_arena_tokenizer(texts, 4096, whole_pieces=fixed_prompt_pieces(), identity=True,
                                      key_pieces=ID_KEY_PIECES if args.key_pieces else ())
    hidden, layers, heads, kv_heads, mlp = SMALL_SIZES[args.fresh]
    return _save_qwen3(Path(tempfile.mkdtemp(prefix="pick-probe-")), tokenizer, 0, hidden=hidden, layers=layers,
                       heads=heads, kv_heads=kv_heads, mlp=mlp, max_positions=args.max_length)


def share_key_embedding(model, tokenizer, torch) -> None:
    from shopdistill_assets.training.tiny_model import ID_KEY_PIECES

    page, call = (tokenizer.convert_tokens_to_ids(p) for p in (ID_KEY_PIECES[0], ID_KEY_PIECES[2]))
    weight = model.get_input_embeddings().weight
    with torch.no_grad():
        weight[call] = weight[page]

    def summed(grad):
        grad = grad.clone()
        grad[page] = grad[call] = grad[page] + grad[call]
        return grad

    weight.register_hook(summed)


def measure(model, rows, torch) -> dict:
    """By page length: [ids, first token right, whole id right, later tokens, later right, first token
    is the first token of an earlier page's first id (the choice made, the page wrong)]."""
    model.eval()
    by_len: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0, 0])
    with torch.no_grad():
        for (ids, _, written), lengths in rows:
            logits = model(input_ids=torch.tensor([ids])).logits[0]
            for i, (positions, k) in enumerate(zip(written, lengths)):
                guesses = [int(logits[p - 1].argmax()) for p in positions]
                right = [g == ids[p] for g, p in zip(guesses, positions)]
                earlier = {ids[w[0]] for w in written[:i]} - {ids[positions[0]]}
                cell = by_len[k]
                cell[0] += 1
                cell[1] += right[0]
                cell[2] += all(right)
                cell[3] += len(right) - 1
                cell[4] += sum(right[1:])
                cell[5] += guesses[0] in earlier
    model.train()
    return by_len


def report(step: int, loss: float | None, tokens: int, cpu: float, by_len: dict) -> None:
    cells = list(by_len.values())
    rate = lambda cells, i, of=0: sum(c[i] for c in cells) / max(sum(c[of] for c in cells), 1)  # noqa: E731
    short = [c for k, c in by_len.items() if k <= 3]
    long = [c for k, c in by_len.items() if k >= 8]
    print(f"step {step:>5}  loss {'  -  ' if loss is None else f'{loss:5.2f}'}  {tokens / 1e6:5.2f}M tokens  {cpu:6.0f} CPU s   "
          f"first {rate(cells, 1):.3f}  an earlier page's {rate(cells, 5):.3f}  later tokens {rate(cells, 4, 3):.3f}  "
          f"exact {rate(cells, 2):.3f}  (pages of 1-3: first {rate(short, 1):.3f}; 8-10: first {rate(long, 1):.3f}, "
          f"exact {rate(long, 2):.3f}; {sum(c[0] for c in cells)} ids)", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", type=Path, default=None, help="a model with its tokenizer; without it, --fresh")
    p.add_argument("--fresh", default="h128l4", help="shape of the fresh random base (tiny_model.SMALL_SIZES) whose "
                   "identity tokenizer is fit on picking transcripts, when no --base is given")
    p.add_argument("--key-pieces", action="store_true", help="fresh base: the JSON before an id one token each "
                   "(tiny_model.ID_KEY_PIECES), so the first result's id follows a token of its own")
    p.add_argument("--catalog", type=Path, required=True)
    p.add_argument("--steps", type=int, default=400, help="0 with --base: only measure the model as it is "
                   "(a trained checkpoint's picking)")
    p.add_argument("--pages", type=int, default=4)
    p.add_argument("--max-results", type=int, default=10)
    p.add_argument("--dense", action="store_true", help="pages and looks only (arena_base.picking_conversation dense)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--qk-norm", type=float, default=None, help="set every q_norm and k_norm weight to this first: "
                   "Qwen3 normalises queries and keys, so at 1.0 an attention logit is at most sqrt(head_dim) (5.7 "
                   "for heads of 32), too flat to pick one position out of hundreds")
    p.add_argument("--share-key", action="store_true", help="with --key-pieces: the call's `{\"product_ids\":\"` "
                   "token gets the page's first-result key's embedding (one row, kept equal: summed gradients), so an "
                   "induction head that copies what followed the current token copies the first result")
    p.add_argument("--loss-on", choices=["assistant", "ids"], default="assistant", help="ids: loss only on the id tokens "
                   "the view calls write (is the copy diluted among the call's other tokens?)")
    p.add_argument("--batch", type=int, default=1, help="transcripts a step (right-padded): more looks per update "
                   "without more pages before each look")
    p.add_argument("--eval", type=int, default=40, help="fresh transcripts measured (with --heldout: problems)")
    p.add_argument("--heldout", type=Path, default=None, help="a distill.py run's --out: measure instead at the fair "
                   "policy's recommend_product steps on its held-out problems, teacher forced, in the conversation "
                   "the evaluation serves (does the pick reach the arena's own last step?)")
    p.add_argument("--recommend-from", type=Path, default=None, help="a distill.py run's --out: train instead on the "
                   "fair policy's recommend_product steps of its train-side problems (loss on the recommended ids; "
                   "cycled in a fresh order each pass): distill.py --recommending-steps, measured on the way")
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--max-length", type=int, default=4096)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--save", type=Path, default=None, help="write the trained model and its tokenizer here (a --base "
                   "for the next phase of a curriculum)")
    args = p.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from shopdistill_assets.training.arena_base import lr_scale, targeted_step

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    encode = _benchmark("distill_copy").encode
    base = args.base or fresh_base(args)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if args.share_key:
        share_key_embedding(model, tokenizer, torch)
    if args.qk_norm is not None:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith(("q_norm.weight", "k_norm.weight")):
                    param.fill_(args.qk_norm)
    model.train()
    if args.recommend_from:
        rows, order, rng = train_recommendations(args.recommend_from, tokenizer, args.max_length), [], random.Random(0)
        while len(order) < args.steps * args.batch:
            order += rng.sample(rows, len(rows))
        train = [(row, None) for row in order[: args.steps * args.batch]]
        args.loss_on = "ids"
    else:
        train = [(encode(tokenizer, t, args.max_length), k) for t, k in
                 transcripts(args.catalog, args.steps * args.batch, 11, tokenizer, args.pages, args.max_results, args.dense)]
    if args.heldout:  # the recommendation's ids only (the prefix's calls write shop ids too)
        held = []
        for text, k in heldout_recommendations(args.heldout, tokenizer, args.eval):
            row = recommend_row(tokenizer, text, args.max_length)
            if row[2]:
                held.append((row, [k] * len(row[2])))
    else:
        held = [(encode(tokenizer, t, args.max_length), k) for t, k in
                transcripts(args.catalog, args.eval, 12, tokenizer, args.pages, args.max_results, args.dense)]
    shown = train or held
    print(f"{len(train)} {'train-side recommend steps' if args.recommend_from else 'picking transcripts'}, {sum(len(e[0][0]) for e in shown) / max(1, len(shown)):.0f} tokens each; "
          f"{sum(len(e[0][2]) for e in held)} ids measured in {len(held)} fresh ones", flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    cpu, tokens = 0.0, 0
    searches = heldout_searches(args.heldout, tokenizer, args.eval, args.max_length) if args.heldout else []
    if args.base:
        report(0, None, 0, 0.0, measure(model, held, torch))
        if searches:
            search_report(model, searches)
    for step in range(1, args.steps + 1):
        batch = [e for e, _ in train[(step - 1) * args.batch: step * args.batch]]
        started = time.process_time()
        for group in optimizer.param_groups:
            group["lr"] = args.lr * lr_scale(step, args.steps, 20)
        rows = []
        for ids, loss_mask, written in batch:
            targets = ([p_ for positions in written for p_ in positions] if args.loss_on == "ids"
                       else [i for i, m in enumerate(loss_mask) if m])
            rows.append((ids, targets))
        loss = targeted_step(model, optimizer, rows)
        tokens += sum(len(ids) for ids, _, _ in batch)
        cpu += time.process_time() - started
        if step % args.every == 0 or step == args.steps:
            report(step, loss, tokens, cpu, measure(model, held, torch))
    if searches and args.steps:
        search_report(model, searches)
    if args.save:
        model.save_pretrained(args.save)
        tokenizer.save_pretrained(args.save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
