"""Round 2 diagnosis: per-token SFT loss on the assistant tokens of train rows, split by kind
(think text, JSON scaffolding, tool names, query text, product ids, shop ids, other argument
values), and where a row's tokens go. Usage: loss_by_kind.py DIR CHECKPOINT N (DIR/sft.parquet:
the gated corpus's successful rows). The role header `<|im_start|>assistant\n` is outside the
trained span and counted apart."""
import sys, json, re, collections
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # the repo root
import torch, pyarrow.parquet as pq
from transformers import AutoTokenizer, AutoModelForCausalLM
W = sys.argv[1]; ck = sys.argv[2]; n = int(sys.argv[3]) if len(sys.argv) > 3 else 12
rows = pq.read_table(W + "/sft.parquet").to_pylist()
tok = AutoTokenizer.from_pretrained(ck); model = AutoModelForCausalLM.from_pretrained(ck).eval()
torch.set_num_threads(1)
loss_by = collections.defaultdict(list); tok_by = collections.Counter()
def kind_of(text, s, e, spans):
    for k, a, b in spans:
        if a <= s < b: return k
    return "other"
for r in rows[:: max(1, len(rows)//n)][:n]:
    msgs = json.loads(r["messages"]) if isinstance(r["messages"], str) else r["messages"]
    text = tok.apply_chat_template(msgs, tools=json.loads(r["tools"]), tokenize=False)
    enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)
    ids = enc["input_ids"]; offs = enc["offset_mapping"]
    spans = []
    # role spans
    for m in re.finditer(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", text, re.S):
        role = m.group(1); body_s = m.start(2); body = m.group(2)
        if role == "system": spans.append(("system+tools", m.start(), m.end())); continue
        if role == "user":
            spans.append(("tool_result" if body.startswith("<tool_response>") else "user_query", m.start(), m.end())); continue
        # assistant: split
        sub = []
        th = re.search(r"<think>(.*?)</think>", body, re.S)
        if th: sub.append(("A:think_text", body_s + th.start(1), body_s + th.end(1)))
        for tc in re.finditer(r"<tool_call>(.*?)</tool_call>", body, re.S):
            blk = tc.group(1); b0 = body_s + tc.start(1)
            nm = re.search(r'"name":\s*"(\w+)"', blk)
            if nm: sub.append(("A:tool_name", b0 + nm.start(1), b0 + nm.end(1)))
            for v in re.finditer(r'"(q|product_ids|shop_id|price|service|page|sort|voucher_type|threshold|discount_type|discount|cap|status|product_id)":\s*("?)([^",}]*)', blk):
                k = v.group(1)
                cat = {"q": "A:query_text", "product_ids": "A:product_ids", "product_id": "A:product_ids", "shop_id": "A:shop_id"}.get(k, "A:other_arg_values")
                sub.append((cat, b0 + v.start(3), b0 + v.end(3)))
        sub.append(("role_header_untrained", m.start(), body_s))
        sub.append(("A:json_punct_keys_tags", body_s, m.end()))
        spans += sub
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    lp = torch.nn.functional.cross_entropy(logits[:-1].float(), torch.tensor(ids[1:]), reduction="none")
    for i in range(1, len(ids)):
        k = kind_of(text, offs[i][0], offs[i][1], spans)
        tok_by[k] += 1
        if k.startswith("A:"): loss_by[k].append(float(lp[i-1]))
tot = sum(tok_by.values()); atot = sum(sum(v) for v in loss_by.values())
print(f"rows {n}; tokens per row {tot/n:.0f}")
for k, c in tok_by.most_common(): print(f"  {k:<26} {c/n:7.1f} tokens/row ({100*c/tot:4.1f}%)")
print("assistant loss share (sum of nats) and mean per token:")
for k, v in sorted(loss_by.items(), key=lambda kv: -sum(kv[1])):
    print(f"  {k:<26} {100*sum(v)/atot:5.1f}% of loss, mean {sum(v)/len(v):.2f} nats/token over {len(v)} tokens")
