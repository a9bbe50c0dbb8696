"""Round 4 pilot: an echo warm-up of a random base model before SFT (user "Repeat: w1 .. wn", the
assistant repeats them; words from the arena catalogue's titles), in plain torch.
Usage: echo_warmup.py BASE_MODEL STEPS OUT_DIR CATALOG_DOCUMENTS (env B: batch, LR)."""
import sys, time, random, torch, os, re
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
torch.set_num_threads(2)
from transformers import AutoModelForCausalLM, AutoTokenizer
from shopdistill_assets.sandbox.catalog import iter_documents
src, steps, outdir, documents = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
m = AutoModelForCausalLM.from_pretrained(src); tok = AutoTokenizer.from_pretrained(src)
docs = list(iter_documents(Path(documents)))
words = sorted({w for d in docs for w in re.findall(r"[a-z0-9:.]+", d["title"].lower())})
print(len(words), "words", flush=True)
rng = random.Random(0)
def example():
    ws = rng.sample(words, rng.randint(2, 8))
    msgs = [{"role": "user", "content": "Repeat: " + " ".join(ws)}, {"role": "assistant", "content": " ".join(ws)}]
    ids = tok.apply_chat_template(msgs, tokenize=True, return_dict=False)
    prompt = tok.apply_chat_template(msgs[:1], tokenize=True, add_generation_prompt=True, return_dict=False)
    return ids, len(prompt)
B = int(os.environ.get("B", "32")); lr = float(os.environ.get("LR", "1e-3"))
opt = torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=0.0)
t = time.time()
for step in range(1, steps + 1):
    ex = [example() for _ in range(B)]; T = max(len(i) for i, _ in ex)
    x = torch.full((B, T), tok.pad_token_id); y = torch.full((B, T), -100)
    for b, (ids, p) in enumerate(ex):
        x[b, :len(ids)] = torch.tensor(ids); y[b, p:len(ids)] = torch.tensor(ids[p:])
    logits = m(input_ids=x).logits[:, :-1]; tgt = y[:, 1:]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1), ignore_index=-100)
    opt.zero_grad(); loss.backward(); opt.step()
    if step % 50 == 0:
        mask = tgt != -100
        acc = (logits.argmax(-1)[mask] == tgt[mask]).float().mean().item()
        print(step, round(loss.item(), 3), "acc", round(acc, 3), f"{time.time()-t:.0f}s", flush=True)
m.save_pretrained(outdir); tok.save_pretrained(outdir)
