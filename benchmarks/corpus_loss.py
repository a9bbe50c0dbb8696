"""Which part of the SFT corpus does a base already fit? Each base's mean loss on a distill.py run's
successful gated-corpus rows, rendered as the SFT renders them, by where the token stands: think text,
tool-call tokens, a find_product call's `q` value (and its first token on its own), everything else
(requests, tool results, the prompt).

    python benchmarks/corpus_loss.py --run OUT --base MODEL_DIR [--base MODEL_DIR ...] [--every 25]

OUT is a `distill.py --out` folder (its lake holds the gated `train_corpus` snapshot, the one built
from split_traces); each MODEL_DIR a small Qwen3 with its tokenizer (a base phase under
`OUT/models/`, or a checkpoint). Every `--every`-th successful row is read, train side only (the
gated corpus is). Measured (results/distill/README.md, run14 and run15): run13's recommend phase fit
the call markup and think text better than seeds 5 and 6's, not the search words, and every
recommend phase raised the loss on everything else from the pick base's 4.16 to ~5.2.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

KINDS = ("think", "call", "q_first", "q", "other")
_THINK = re.compile(r"<think>.*?</think>", re.S)
_CALL = re.compile(r"<tool_call>.*?</tool_call>", re.S)
_QUERY = re.compile(r'"name":\s*"find_product".*?"q":\s*"((?:[^"\\]|\\.)*)"', re.S)


def token_kinds(text: str, offsets: list[tuple[int, int]]) -> list[str]:
    """The kind of each token of `text` (by its start offset): the first token of a find_product
    call's `q` value, the rest of it, other tool-call tokens, think text, everything else."""
    thinks = [m.span() for m in _THINK.finditer(text)]
    calls = [m.span() for m in _CALL.finditer(text)]
    queries = [q.span(1) for start, end in calls for q in _QUERY.finditer(text, start, end)]
    kinds, seen = [], set()
    for start, _ in offsets:
        query = next((span for span in queries if span[0] <= start < span[1]), None)
        if query is not None:
            kinds.append("q" if query in seen else "q_first")
            seen.add(query)
        elif any(s <= start < e for s, e in calls):
            kinds.append("call")
        elif any(s <= start < e for s, e in thinks):
            kinds.append("think")
        else:
            kinds.append("other")
    return kinds


def corpus_loss(model_dir: str | Path, texts: list[str], max_length: int = 4096) -> dict[str, tuple[float, int]]:
    """{kind: (mean loss in nats, tokens)} of the model on `texts`, every token after the first."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    sums = {kind: [0.0, 0] for kind in KINDS}
    with torch.no_grad():
        for text in texts:
            enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            ids, offsets = enc["input_ids"][:max_length], enc["offset_mapping"][:max_length]
            if len(ids) < 2:
                continue
            logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
            losses = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none").tolist()
            for kind, loss in zip(token_kinds(text, offsets)[1:], losses, strict=True):
                sums[kind][0] += loss
                sums[kind][1] += 1
    return {kind: (round(total / n, 2) if n else float("nan"), n) for kind, (total, n) in sums.items()}


def gated_texts(run: Path, every: int) -> list[str]:
    """Every `every`-th successful row of the run's gated train_corpus snapshot, rendered."""
    import distill
    from shopdistill_assets.training.tiny_model import render_conversations

    lake = distill.resources_for(run)["lake"]
    gated = distill.gated_versions(lake)
    if len(gated) != 1:
        raise SystemExit(f"{run}: needs one gated train_corpus snapshot (has {gated})")
    rows = lake.read_snapshot("train_corpus", gated[0]).sort("trace_id").to_dicts()
    successful = [r for r in rows if (r.get("score") or 0) >= 1]
    print(f"train_corpus {gated[0]}: {len(successful)} successful rows of {len(rows)}; reading every {every}th: "
          f"{len(successful[::every])}", flush=True)
    return render_conversations(successful[::every])[1:]  # [0] is the bare prompt render_conversations adds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="a distill.py --out folder")
    p.add_argument("--base", action="append", required=True, help="a model folder (repeat to compare)")
    p.add_argument("--every", type=int, default=25)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    texts = gated_texts(Path(args.run).resolve(), args.every)
    print("| base | " + " | ".join(f"{k} (nats, tokens)" for k in KINDS) + " |")
    print("|---" * (len(KINDS) + 1) + "|")
    for base in args.base:
        figures = corpus_loss(base, texts)
        print(f"| {base} | " + " | ".join(f"{figures[k][0]} ({figures[k][1]})" for k in KINDS) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
