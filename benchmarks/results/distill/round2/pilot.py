"""Round 2 pilot: base model (env PIECES, IDS: whole pieces on/off), SFT N steps on the gated corpus's
successful rows of round 1's run (/tmp/dx/r2/sft.parquet), env LR, SCHED, FULL_LOSS, SAVE, RESUME.
Usage: pilot.py OUT_DIR STEPS."""
import sys, os, json, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # the repo root
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import pyarrow.parquet as pq
W = Path(sys.argv[1]); steps = int(sys.argv[2]); W.mkdir(parents=True, exist_ok=True)
E = os.environ.get
ARENA = Path("/tmp/dx/full/arena")
rows = pq.read_table("/tmp/dx/r2/sft.parquet").to_pylist()
from shopdistill_assets.eval.tiny_model import build_small_model, render_conversations, fixed_prompt_pieces
from shopdistill_assets.sandbox.catalog import iter_documents
model_dir = W / "base"
if not (model_dir / "config.json").exists():
    pieces = []
    if E("PIECES", "1") == "1":
        pieces += fixed_prompt_pieces()
    if E("IDS", "1") == "1":
        prods = list(iter_documents(ARENA / "catalog/documents.jsonl.gz"))
        pieces += sorted({p["product_id"] for p in prods}) + sorted({p["shop_id"] for p in prods})
    texts = render_conversations(rows[:: max(1, len(rows) // 400)])
    build_small_model(model_dir, texts, size=E("SIZE", "small"), whole_pieces=pieces)
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(model_dir)
lens = sorted(len(tok.apply_chat_template(t["messages"] if isinstance(t["messages"], list) else json.loads(t["messages"]), tools=json.loads(t["tools"]), tokenize=True, return_dict=False)) for t in rows[:300])
print("vocab", len(tok), "token lengths p10/50/90/max", lens[30], lens[150], lens[270], lens[-1], flush=True)
if steps:
    from datasets import load_dataset
    from trl import SFTConfig, SFTTrainer
    ds = load_dataset("parquet", data_files="/tmp/dx/r2/sft.parquet", split="train").remove_columns(["trace_id", "category"])
    cfg = SFTConfig(output_dir=str(W / "out"), assistant_only_loss=E("FULL_LOSS") != "1", max_length=int(E("MAXLEN", "2048")),
                    per_device_train_batch_size=int(E("BATCH", "1")), learning_rate=float(E("LR", "2e-3")),
                    lr_scheduler_type=E("SCHED", "cosine"), warmup_steps=0.05, max_steps=steps, logging_steps=int(E("LOGSTEPS", "25")),
                    save_strategy=E("SAVE", "no"), save_steps=int(E("SAVESTEPS", "500")), report_to=[], bf16=False, use_cpu=True, seed=0, disable_tqdm=True, weight_decay=0.0,
                    gradient_checkpointing=False)
    tr = SFTTrainer(model=str(model_dir), args=cfg, train_dataset=ds, processing_class=tok)
    t = time.time(); c = time.process_time(); tr.train(resume_from_checkpoint=E("RESUME") or None); wall = time.time() - t; cpu = time.process_time() - c
    print("trained", steps, "steps wall", round(wall), "cpu", round(cpu), "tokens", tr.state.num_input_tokens_seen, flush=True)
    print([(x.get("step"), round(x.get("loss", 0), 3)) for x in tr.state.log_history if "loss" in x])
    tr.save_model(str(W / "ckpt")); tok.save_pretrained(str(W / "ckpt"))
