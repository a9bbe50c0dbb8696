"""Round 4 pilot: can the random small model learn to copy a repeated span of uniform random tokens?
Plain torch; loss on the repeat only. Usage: induction.py BASE_MODEL BATCH LENGTH STEPS (env LR)."""
import sys, time, torch, os
torch.set_num_threads(int(os.environ.get("THREADS","2")))
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1])
V = m.config.vocab_size
B, L, steps = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
g = torch.Generator().manual_seed(0)
opt = torch.optim.AdamW(m.parameters(), lr=float(os.environ.get("LR","1e-3")), weight_decay=0.0)
def batch():
    # [random prefix][span][random][span again]; loss on the repeated span
    x = torch.randint(16, V, (B, L), generator=g)
    mask = torch.zeros(B, L, dtype=torch.bool)
    for b in range(B):
        n = int(torch.randint(8, L // 3, (1,), generator=g))
        s1 = int(torch.randint(0, L // 2 - n, (1,), generator=g))
        s2 = int(torch.randint(L // 2, L - n + 1, (1,), generator=g))
        x[b, s2:s2 + n] = x[b, s1:s1 + n]
        mask[b, s2 + 1:s2 + n] = True   # the first token of the repeat is not predictable
    return x, mask
t = time.time()
for step in range(1, steps + 1):
    x, mask = batch()
    logits = m(input_ids=x).logits[:, :-1]
    tgt = x[:, 1:].clone(); tgt[~mask[:, 1:]] = -100
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), ignore_index=-100)
    opt.zero_grad(); loss.backward(); opt.step()
    if step % 25 == 0:
        acc = (logits.argmax(-1)[mask[:, 1:]] == x[:, 1:][mask[:, 1:]]).float().mean().item()
        print(step, round(loss.item(), 3), "acc", round(acc, 3), f"{time.time()-t:.0f}s", flush=True)
