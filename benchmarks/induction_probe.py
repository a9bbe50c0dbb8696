"""Does the small Qwen3 form an induction head (find the current token earlier, copy the one after
it), and at which distances does it then copy? Issue 20: product ids are copied 700-2,000 tokens
after the page that shows them.

    python benchmarks/induction_probe.py [--steps 300] [--shape h128l4] [--schedules fixed64 grow random]

Each schedule trains a fresh random model (vocabulary 4,096, plain torch, AdamW 2e-3, ~4k tokens a
step) on random token sequences written twice (loss on the second copy), then measures top-1 copy
accuracy on fresh sequences of length 64, 256 and 1,024 written twice, and of 64 and 16 tokens
written again after 1,500 / 600 random tokens in between:
  fixed64  every batch 16 x (64 + 64)   (training/arena_base.induction_batch)
  grow     half the steps at 64, a quarter at 256, a quarter at 1,024
  random   length 32-512 and a gap of 0-2,048 random tokens drawn for each batch
  fixed64+random  fixed64's steps, then as many of random's (the head formed first, then stretched)
"""

from __future__ import annotations

import argparse
import random
import sys
import time

VOCAB = 4096


def sequences(torch, batch: int, length: int, gap: int, generator) -> tuple:
    first = torch.randint(10, VOCAB, (batch, length), generator=generator)
    between = torch.randint(10, VOCAB, (batch, gap), generator=generator)
    return torch.cat([first, between, first], dim=1), length + gap


def schedule(name: str, steps: int) -> list[tuple[int, int, int]]:
    """(batch, length, gap) for each step."""
    if name == "fixed64":
        return [(16, 64, 0)] * steps
    if name == "fixed64+random":
        return schedule("fixed64", steps) + schedule("random", steps)
    if name == "grow":
        return [(16, 64, 0)] * (steps // 2) + [(4, 256, 0)] * (steps // 4) + [(1, 1024, 0)] * (steps - steps // 2 - steps // 4)
    rng = random.Random(0)
    out = []
    for _ in range(steps):
        length, gap = rng.choice([32, 64, 128, 256, 512]), rng.choice([0, 0, 64, 256, 1024, 2048])
        out.append((max(1, 4096 // (2 * length + gap)), length, gap))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--shape", default="h128l4", help="hidden size and layers, e.g. h128l4, h256l4, h128l2")
    p.add_argument("--schedules", nargs="+", default=["fixed64", "grow", "random"])
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.set_num_threads(args.threads)
    hidden, layers = (int(x) for x in args.shape.removeprefix("h").split("l"))
    probes = [("64", 64, 0), ("256", 256, 0), ("1024", 1024, 0), ("64 after 1,500", 64, 1500), ("16 after 600", 16, 600)]
    print(f"shape {args.shape}, {args.steps} steps; top-1 copy accuracy on the second copy")
    print(f"{'schedule':<9} {'CPU s':>6}  " + "  ".join(f"{name:>14}" for name, _, _ in probes))
    for name in args.schedules:
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(Qwen3Config(
            vocab_size=VOCAB, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
            num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4, max_position_embeddings=4096,
            tie_word_embeddings=True))
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.0)
        generator = torch.Generator().manual_seed(1)
        started = time.process_time()
        for step, (batch, length, gap) in enumerate(schedule(name, args.steps), 1):
            for group in optimizer.param_groups:
                group["lr"] = 2e-3 * min(1.0, step / 50)
            x, start = sequences(torch, batch, length, gap, generator)
            logits = model(input_ids=x).logits[:, start:-1]
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), x[:, start + 1:].reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        cpu = time.process_time() - started
        accuracy = []
        with torch.no_grad():
            for _, length, gap in probes:
                x, start = sequences(torch, 4, length, gap, generator)
                guess = model(input_ids=x).logits[:, start:-1].argmax(-1)
                accuracy.append((guess == x[:, start + 1:]).float().mean().item())
        print(f"{name:<9} {cpu:>6.0f}  " + "  ".join(f"{a:>14.3f}" for a in accuracy), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
