"""What the distillation experiment stands on: the fair policy reads requests right, the arena
tokenizer and small model build offline, batched decoding answers like one-at-a-time decoding,
the SFT outcome filter, and the report's goals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from shopdistill_assets.agent.fair import parse_item, parse_request

REPO = Path(__file__).resolve().parents[1]

PRODUCT = "Can you find a waist bag from logitech, less than 602 php, sold by an official LazMall store, closure: zipper."
SHOP = ("Which store has all of these items: (1) a adidas brand hair dryer, in red color; (2) a kaiser laptop stand, "
        "adjustable: no. The shop should sell all these products.")
VOUCHER = ("I need these items: (1) a speed brand face toner, in the 04 colour option; (2) a hanabishi electric kettle, "
           "having 1.7l capacity, from 553 to 1383 pesos.\n\nMy budget is only `1050`, but I have a voucher with the "
           "following rules:\n1. The voucher only applies to the products from the same shop.\n2. It is valid only "
           "when the total price of the products exceeds `616`.\n3. It provides a percentage discount of `14%` with a "
           "cap of `512`.")


def test_fair_policy_reads_the_arena_phrasings():
    product = parse_request(PRODUCT)
    assert product.category == "Product" and not product.same_shop
    (item,) = product.items
    assert item.head == ("logitech", "waist", "bag") and item.values == ("zipper",)
    assert item.search_arguments() == {"q": "logitech waist bag zipper", "page": 1, "price": "-602", "service": "official"}
    shop = parse_request(SHOP)
    assert shop.category == "Shop" and shop.same_shop and [i.head for i in shop.items] == [
        ("adidas", "hair", "dryer"), ("kaiser", "laptop", "stand")]
    assert shop.items[0].color == "red" and shop.items[1].values == ("no",)
    assert shop.items[1].search_arguments("4575881")["shop_id"] == "4575881"
    voucher = parse_request(VOUCHER)
    assert voucher.category == "Voucher" and voucher.same_shop and voucher.budget == 1050
    assert voucher.voucher == {"voucher_type": "shop", "threshold": 616.0, "discount_type": "percentage",
                               "discount": 0.14, "cap": 512.0}
    assert voucher.items[0].color == "04" and voucher.items[1].price == (553.0, 1383.0)
    assert voucher.items[1].values == ("1.7l",)
    for phrase, code in (("with free shipping", "freeShipping"), ("with cash on delivery", "COD"),
                         ("in a LazFlash sale", "flashsale"), ("that ships for free", "freeShipping")):
        assert parse_item(f"a nike running shoes, {phrase}").services == (code,)
    assert parse_item("a nike running shoes, above 900 pesos").price == (900.0, None)
    assert parse_item("a nike running shoes, having eu:40 size").values == ("eu:40",)


def test_fair_policy_plays_an_episode_from_tool_results_alone():
    from shopdistill_assets.agent.policies import FairPolicy

    policy = FairPolicy()
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": PRODUCT}]
    first = policy(messages)
    call = first["tool_calls"][0]["function"]
    assert call["name"] == "find_product" and json.loads(call["arguments"])["price"] == "-602"
    results = [{"product_id": "111", "shop_id": "9", "title": "Logitech new waist bag buckle nylon", "price": 300.0},
               {"product_id": "222", "shop_id": "9", "title": "Logitech basic waist bag zipper nylon", "price": 320.0}]
    messages += [first, {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": json.dumps(results)}]
    second = policy(messages)
    assert second["tool_calls"][0]["function"] == {"name": "recommend_product", "arguments": '{"product_ids": "222"}'}
    assert "222" in second["reasoning_content"] and "111" in second["reasoning_content"]  # compares two candidates
    messages += [second, {"role": "tool", "tool_call_id": second["tool_calls"][0]["id"], "content": '"Recommended."'}]
    assert policy(messages)["tool_calls"][0]["function"]["name"] == "terminate"


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    from shopdistill_assets.training.tiny_model import build_small_model, render_conversations

    rows = [{"messages": [{"role": "system", "content": "You shop."}, {"role": "user", "content": PRODUCT},
                          {"role": "assistant", "content": "", "reasoning_content": "Searching.", "tool_calls": [
                              {"id": "c1", "type": "function", "function": {
                                  "name": "find_product", "arguments": '{"q":"waist bag logitech","page":1}'}}]},
                          {"role": "tool", "tool_call_id": "c1", "content": '[{"product_id":"5035687794","price":4.0}]'}],
             "tools": "[]"}] * 20
    return build_small_model(tmp_path_factory.mktemp("small") / "m", render_conversations(rows), vocab_size=2000)


def test_arena_tokenizer_folds_json_spacing_and_groups_digits(small_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(small_model)
    compact = '[{"product_id":"5035687794","price":459.0},{"product_id":"12"}]'
    spaced = json.dumps(json.loads(compact))
    assert compact != spaced and tokenizer(compact)["input_ids"] == tokenizer(spaced)["input_ids"]
    pieces = [tokenizer.decode([i]) for i in tokenizer("id 5035687794")["input_ids"]]
    assert pieces[-4:] == ["503", "568", "779", "4"]
    assert all(f"{n:03d}" in tokenizer.get_vocab() for n in range(1000))
    words = [tokenizer.decode([i]) for i in tokenizer('a logitech bag, {"q":"waist logitech"}')["input_ids"]]
    assert words.count(" logitech") == 2  # a word after a space is one piece wherever it stands
    text = tokenizer.apply_chat_template([{"role": "user", "content": PRODUCT}], tokenize=False,
                                         add_generation_prompt=True)
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text


def test_no_lone_digit_splits_an_id_three_three_two_two_and_round_trips():
    """IDENTITY_SPLIT_NO_LONE_DIGIT: no number of two digits or more ends in a lone digit token; the
    pieces are vocabulary tokens, the text decodes back, and the flag needs the identity split."""
    from shopdistill_assets.training.tiny_model import build_arena_tokenizer

    texts = ['{"product_id":"5035687794","price":1299.5,"shop_id":"3015838"} a 7 day bag'] * 20
    tokenizer = build_arena_tokenizer(texts, 1200, identity=True, no_lone_digit=True)
    pieces = lambda text: [tokenizer.decode([i]) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]
    assert [p for p in pieces("id 5035687794") if p.strip()][-4:] == ["503", "568", "77", "94"]
    groups = {"12": ["12"], "123": ["123"], "1234": ["12", "34"], "12345": ["12", "345"], "3015838": ["301", "58", "38"],
              "7": ["7"]}
    for number, expected in groups.items():
        assert [p for p in pieces(f"x {number} y") if p.isdigit()] == expected, number
    text = texts[0] + " 1234567"
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text
    plain = build_arena_tokenizer(texts, 1200, identity=True)
    assert [p for p in [plain.decode([i]) for i in plain("5035687794", add_special_tokens=False)["input_ids"]]] == [
        "503", "568", "779", "4"]  # the default split, unchanged
    with pytest.raises(ValueError, match="needs identity"):
        build_arena_tokenizer(texts, 1200, no_lone_digit=True)
    with pytest.raises(SystemExit):
        _benchmark("distill").parse_args(["--digit-pairs", "--no-identity-tokens"])


def test_whole_pieces_are_one_token_each_and_round_trip():
    from shopdistill_assets.agent.rollout import SYSTEM_PROMPT
    from shopdistill_assets.sandbox.tool_specs import tool_schemas
    from shopdistill_assets.training.tiny_model import build_arena_tokenizer, fixed_prompt_pieces

    pieces = fixed_prompt_pieces()
    assert len(pieces) == len(tool_schemas()) + 2  # head, one line per tool, tail
    tokenizer = build_arena_tokenizer(["a logitech bag"] * 5, vocab_size=1200, whole_pieces=[*pieces, "5035687794"])
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "?"}]
    text = tokenizer.apply_chat_template(messages, tools=tool_schemas(), tokenize=False, add_generation_prompt=True)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    plain = build_arena_tokenizer(["a logitech bag"] * 5, vocab_size=1200)
    assert len(ids) < 60 < 1000 < len(plain(text)["input_ids"])  # the system block is a handful of tokens
    assert tokenizer.decode(ids) == text
    for subset in (tool_schemas()[:2], tool_schemas()[3:]):  # a trace's own tool subset compresses as well
        assert len(tokenizer.apply_chat_template(messages, tools=subset, tokenize=True, return_dict=False)) < 60
    result = json.dumps([{"product_id": "5035687794", "price": 4.0}])  # spaced JSON still folds around the id
    assert "5035687794" in [tokenizer.decode([i]) for i in tokenizer(result)["input_ids"]]
    assert tokenizer(result)["input_ids"] == tokenizer(json.dumps(json.loads(result), separators=(",", ":")))["input_ids"]


def test_batched_decoding_answers_like_one_at_a_time(small_model):
    from shopdistill_assets.agent.hf_policy import BatchedHFPolicy, HFPolicy, checkpoint_policy

    single = HFPolicy(small_model, max_new_tokens=12)
    batched = checkpoint_policy(small_model, max_new_tokens=12, batch_size=4)
    assert isinstance(batched, BatchedHFPolicy)
    prompts = [[{"role": "user", "content": f"find a nike shoe under {100 * k} PHP"}] for k in range(1, 6)]
    replies: list = [None] * len(prompts)

    def ask(i: int) -> None:
        replies[i] = batched(prompts[i])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r["content"] for r in replies] == [single(p)["content"] for p in prompts]
    sampled = [batched(prompts[0], temperature=1.0, seed=s)["content"] for s in (3, 3, 4)]
    assert sampled[0] == sampled[1]


def test_sft_outcome_filter_keeps_successful_rows():
    from datasets import Dataset

    from shopdistill_assets.training.assets import StageTrainConfig
    from shopdistill_assets.training.stages import STAGES
    from shopdistill_assets.training.stages.sft import SFTScriptArgs, successful

    rows = Dataset.from_list([{"trace_id": str(i), "score": s} for i, s in enumerate([1.0, 0.0, None, 1.0])])
    assert successful(rows)["trace_id"] == ["0", "3"]
    assert len(successful(Dataset.from_list([{"trace_id": "x"}]))) == 1  # rollout datasets carry no score
    assert SFTScriptArgs().only_successful is True  # the ORO paper's choice, the default
    assert StageTrainConfig(only_successful=False).overrides() == {"only_successful": False}  # passed through
    assert STAGES["sft"].script == "sft.py"


def test_report_checks_the_goals(tmp_path):
    from shopdistill_assets.evaluation import distill_report

    def summary(asr, p8):
        return {"asr": asr, "pass_at_1": asr, "pass_at_k": {"1": asr, "8": p8}, "counts": {"problems": 10},
                "by_category": {"Product": {"asr": asr}}, "format_valid_rate": 0.625,
                "search_grounding": {"searches": 9, "word_share": 0.0345, "all_words_share": 0.0}}

    lineage = {"checkpoint": {"stage": "sft", "version": "abc"}, "corpus": {"version": "v1"},
               "dataset": {"asset": "train_corpus", "version": "v1"}, "training": {"rows": 5, "steps": 3, "tokens": 99}}
    rows = [distill_report.row("base", summary(0.0, 0.0)), distill_report.row("sft_unfiltered", summary(0.1, 0.3)),
            distill_report.row("sft", summary(0.4, 0.8), lineage, "split_traces"),
            distill_report.row("resft", summary(0.5, 0.7)), distill_report.row("kto", summary(0.45, 0.7))]
    goals = {g: ok for g, ok, _ in distill_report.targets(rows, ["base", "sft", "resft", "kto"])}
    assert goals == {"SFT >= +25 points held-out ASR over the base": True,
                     "each later stage not below the one before": False,
                     "pass@8 − pass@1 narrowed after rejection re-SFT": True,
                     "gated corpus ahead of the unfiltered one (same token budget)": True}
    flat = [distill_report.row(p, summary(0.0, 0.0)) for p in ("base", "sft", "resft")]
    assert dict((g, n) for g, _, n in distill_report.targets(flat, ["base", "sft", "resft"]))[
        "each later stage not below the one before"] == "no drop (every stage at 0.0: vacuous)"
    paths = distill_report.write(rows, tmp_path, "# t", distill_report.targets(rows, ["base", "sft"]), {})
    text = paths["markdown"].read_text()
    assert "`sft/abc`" in text and "`v1` (split_traces)" in text and "| 40.0 |" in text
    assert "| format-valid episodes | search words from the request |" in text and "| 62.5 | 3.5 |" in text
    assert paths["png"].stat().st_size > 0 and json.loads(paths["json"].read_text())["rows"][2]["tokens"] == 99


# -- the dense metric: teacher-forced next-step match ------------------------------------------

@pytest.fixture(scope="module")
def heldout_arena(tmp_path_factory):
    """A one-day simulated arena: its catalogue and a dozen suite problems of every category."""
    from datetime import date

    from shopdistill_assets.sandbox.problems import load_suite
    from shopdistill_assets.sim import ArenaConfig, simulate
    from shopdistill_assets.sim.arena import build_world

    cfg = ArenaConfig(out=tmp_path_factory.mktemp("arena"), start_day=date(2026, 11, 1), days=1, traces_per_day=50,
                      seed=7)
    simulate(cfg)
    catalog, _ = build_world(cfg)
    problems = sorted((p for f in (cfg.out / "suites").glob("[psv]*.json") for p in load_suite(f)),
                      key=lambda p: p.problem_id)[:12]
    return catalog, problems


def test_step_match_scores_the_teacher_one_and_the_floor_lower(heldout_arena):
    from shopdistill_assets.agent.policies import FairPolicy, RandomPolicy
    from shopdistill_assets.agent.rollout import SYSTEM_PROMPT
    from shopdistill_assets.evaluation.step_match import step_match, teacher_steps

    catalog, problems = heldout_arena
    assert {p.category for p in problems} == {"Product", "Shop", "Voucher"}
    steps = {p.problem_id: teacher_steps(p, catalog) for p in problems}
    first = steps[problems[0].problem_id]
    # the prefix is the evaluation's own conversation: its system prompt, real tool results
    assert first[0].prefix[0] == {"role": "system", "content": SYSTEM_PROMPT} and len(first[0].prefix) == 2
    assert first[0].name == "find_product" and first[-1].name == "terminate"
    assert json.loads(first[1].prefix[-1]["content"]), "the search's real result is in the next prefix"
    fair = step_match(FairPolicy(), problems, catalog, steps_by_problem=steps)
    by_tool = fair.pop("by_tool")
    assert fair == {"step_match": 1.0, "format_valid_steps": 1.0, "problems": 12,
                    "steps": sum(map(len, steps.values())), "policy_errors": 0}
    teacher_tools = [s.name for v in steps.values() for s in v]
    assert by_tool == {name: {"steps": teacher_tools.count(name), "match": 1.0, "exact": 1.0}
                       for name in sorted(set(teacher_tools))}
    floor = step_match(RandomPolicy(seed=0), problems, catalog, steps_by_problem=steps, concurrency=4)
    assert 0.2 < floor["step_match"] < 0.8 and floor["policy_errors"] == 0  # right tools at times, wrong values
    # a random pick of the right tool is not the right recommendation: the exact share shows it apart
    assert floor["by_tool"]["recommend_product"]["exact"] < floor["by_tool"]["recommend_product"]["match"] < 1.0


def test_step_match_drives_a_checkpoint(heldout_arena, tmp_path):
    from shopdistill_assets.agent.hf_policy import checkpoint_policy
    from shopdistill_assets.evaluation.step_match import step_match, teacher_steps
    from shopdistill_assets.training.tiny_model import build_tiny_model

    catalog, problems = heldout_arena
    few = problems[:2]
    steps = {p.problem_id: teacher_steps(p, catalog) for p in few}
    model = checkpoint_policy(build_tiny_model(tmp_path / "tiny"), max_new_tokens=8, batch_size=4)
    result = step_match(model, few, catalog, steps_by_problem=steps, concurrency=4)
    # random weights emit no tool call: every step is answered (no error) and scores 0
    assert all(t["match"] == 0.0 and t["exact"] == 0.0 for t in result.pop("by_tool").values())
    assert result == {"step_match": 0.0, "format_valid_steps": 0.0, "problems": 2,
                      "steps": sum(map(len, steps.values())), "policy_errors": 0}


def test_report_renders_step_match_and_asr_intervals(tmp_path):
    from shopdistill_assets.agent.metrics import wilson_interval
    from shopdistill_assets.evaluation import distill_report

    def summary(asr):
        return {"asr": asr, "pass_at_1": asr, "pass_at_k": {"1": asr, "8": asr}, "counts": {"problems": 30},
                "by_category": {"Product": {"asr": asr, "problems": 12}}}

    lo, hi = wilson_interval(0.0, 30)
    assert lo == 0.0 and 0.11 < hi < 0.12  # 0 of 30 problems still bounds ASR only below ~11 points
    for n in range(1, 200):  # centre - half rounds to +-1e-17 at 0 (n = 11, 22, ...): never past the rate
        for rate in (0.0, 1.0, 1 / 3):
            lo, hi = wilson_interval(rate, n)
            assert 0.0 <= lo <= rate <= hi <= 1.0
    rows = [distill_report.row("quick", summary(0.0), step_match=None)]
    rows[0]["asr_interval"] = wilson_interval(0.0, 11)
    distill_report.write(rows, tmp_path / "eleven", "# t", [], {})  # plots (it raised on a bar below 0)
    rows = [distill_report.row("base", summary(0.0), step_match={"step_match": 0.2, "steps": 90}),
            distill_report.row("sft_unfiltered", summary(0.0), step_match={"step_match": 0.41, "steps": 90}),
            distill_report.row("sft", summary(0.0333), step_match={
                "step_match": 0.55, "steps": 90, "by_tool": {"recommend_product": {"steps": 30, "match": 0.7, "exact": 0.1}}})]
    goals = {g: (ok, n) for g, ok, n in distill_report.targets(rows, ["base", "sft"])}
    ok, numbers = goals["gated corpus ahead of the unfiltered one (same token budget)"]
    assert ok and "intervals overlap" in numbers and "step match 55.0 vs 41.0" in numbers
    text = distill_report.write(rows, tmp_path, "# t", distill_report.targets(rows, ["base", "sft"]),
                                {})["markdown"].read_text()
    assert "| ASR [95 %] |" in text and "| step match |" in text
    assert "| base | 0.0 [0.0–11.4] |" in text and "| 3.3 [0.6–16.7] |" in text and "| 55.0 | 10.0 |" in text
    lines = text.splitlines()
    head = next(line for line in lines if line.startswith("| policy |")).split(" | ")
    column = head.index("recommendation right (teacher-forced)")
    cells = {line.split(" | ")[0]: line.split(" | ") for line in lines if line.startswith("| ") and " | " in line}
    assert cells["| base"][column] == "–" and cells["| sft"][column] == "10.0"  # base: no by_tool, not measured
    assert "Wilson" in text and "n = the number of held-out problems" in text


def test_identity_tokens_make_a_copied_word_the_same_tokens():
    from shopdistill_assets.training.tiny_model import build_arena_tokenizer, loss_copy_share, render_conversations

    call = {"id": "c1", "type": "function", "function": {"name": "find_product",
                                                         "arguments": '{"q":"logitech waist bag","page":1}'}}
    rows = [{"messages": [{"role": "user", "content": PRODUCT}, {"role": "assistant", "content": "", "tool_calls": [call]},
                          {"role": "tool", "tool_call_id": "c1", "content": '[{"product_id":"5035687794"}]'}],
             "tools": "[]"}] * 10
    texts = render_conversations(rows)
    identity = build_arena_tokenizer(texts, vocab_size=1600, identity=True)
    def occurrences(tokenizer, word, text):
        ids, want = tokenizer(text)["input_ids"], tokenizer(word)["input_ids"]
        return sum(ids[i:i + len(want)] == want for i in range(len(ids)))

    text = 'a logitech bag, {"q":"logitech bag"}'
    assert occurrences(identity, "logitech", text) == 2 and occurrences(identity, "bag", text) == 2
    assert identity.decode(identity(PRODUCT, add_special_tokens=False)["input_ids"]) == PRODUCT
    request = set(identity(PRODUCT)["input_ids"])
    query = identity('{"q":"logitech waist bag","page":1}')["input_ids"]
    words = [i for i in query if identity.decode([i]).strip().isalpha() and identity.decode([i]) not in ("q", "page")]
    assert words and all(i in request for i in words)  # every search word's tokens stand in the request
    measured = loss_copy_share(identity, texts[1:])
    assert measured["call_content_tokens"] > 0 and 0 < measured["call_copies"] < 1  # keys and names are no copies
    assert measured["copies"] >= measured["call_copies"] * measured["call_content_tokens"] / measured["loss_content_tokens"]



def test_the_arena_base_reads_catalogue_browsing_and_no_problem(heldout_arena, tmp_path):
    """Browsing transcripts: searches made of the named product's words, ids copied from the page
    in page order, no request of any problem; pretraining steps and records itself beside the weights."""
    import random

    from transformers import AutoModelForCausalLM

    from shopdistill_assets.sandbox import write_catalog
    from shopdistill_assets.sandbox.tools import Sandbox
    from shopdistill_assets.training.arena_base import CARD, browsing_conversation, browsing_texts, pretrain
    from shopdistill_assets.training.tiny_model import build_small_model, build_tokenizer

    catalog, problems = heldout_arena
    products = sorted(catalog, key=lambda p: p["product_id"])
    conversation = browsing_conversation(products, Sandbox(catalog), random.Random(3))
    named = conversation[0]["content"]
    calls = [(m["tool_calls"][0]["function"], json.loads(m["tool_calls"][0]["function"]["arguments"]))
             for m in conversation if m.get("tool_calls")]
    pages = [json.loads(m["content"]) for m in conversation if m["role"] == "tool"]
    assert [f["name"] for f, _ in calls][:2] == ["find_product", "view_product_information"]
    assert all(word in named for f, args in calls if f["name"] == "find_product" for word in args["q"].split())
    viewed = calls[1][1]["product_ids"].split(",")
    assert viewed == [p["product_id"] for p in pages[0][: len(viewed)]]  # copies of the page, in its order

    catalog_dir = tmp_path / "catalog"
    write_catalog(catalog, catalog_dir / "documents.jsonl.gz")
    texts = browsing_texts(catalog_dir, 6, 0, build_tokenizer(vocab_size=300))
    assert len(texts) == 6 and all("<tool_response>" in t for t in texts)
    assert not any(p.query in t for p in problems for t in texts)  # no request of any problem
    base = build_small_model(tmp_path / "random", texts, size="h128l4", vocab_size=1200, identity=True)
    card = pretrain(base, texts, tmp_path / "base", max_length=512, sources={"catalog": "test"})
    assert card["steps"] == 6 and card["tokens"] > 6 * 100 and card["first_loss"] > card["final_loss"]
    assert json.loads((tmp_path / "base" / CARD).read_text())["sources"] == {"catalog": "test"}
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "base").config.hidden_size == 128


def test_a_picking_transcript_looks_at_the_first_result_of_each_cut_page(heldout_arena):
    """benchmarks/pick_probe.py's text: pages cut to 1..max_results, each followed by a look at its
    first result (the only rule that predicts the id); dense: pages and looks alone."""
    import random

    from shopdistill_assets.sandbox.tools import Sandbox
    from shopdistill_assets.training.arena_base import picking_conversation

    catalog, problems = heldout_arena
    products = sorted(catalog, key=lambda p: p["product_id"])
    for dense in (False, True):
        conversation = picking_conversation(products, Sandbox(catalog), random.Random(5), pages=6, max_results=3,
                                            dense=dense)
        results = [json.loads(m["content"]) for m in conversation if m["role"] == "tool"]
        pages = [r for r in results if "title" in r[0]]  # search pages, not the looks' product pages
        looks = [json.loads(m["tool_calls"][0]["function"]["arguments"])["product_ids"] for m in conversation
                 if m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == "view_product_information"]
        assert pages and len(looks) == len(pages) and all(1 <= len(p) <= 3 for p in pages)
        assert looks == [p[0]["product_id"] for p in pages]
        assert len({len(p) for p in pages}) > 1  # the id's distance back varies
        roles = [m["role"] for m in conversation[1:]]
        assert roles == (["tool", "assistant"] * len(pages) if dense else ["assistant", "tool"] * 2 * len(pages))
    assert not any(p.query in m.get("content", "") for p in problems for m in conversation)


def test_the_picking_phase_puts_its_loss_on_the_looked_at_ids_and_records_itself(heldout_arena, tmp_path):
    """The base's picking phase: its loss falls on the ids the look calls write and nowhere else;
    each phase of the curriculum steps, is measured on fresh transcripts and is recorded in the card."""
    import random

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from shopdistill_assets.sandbox import write_catalog
    from shopdistill_assets.sandbox.tools import Sandbox
    from shopdistill_assets.agent.rollout import SYSTEM_PROMPT
    from shopdistill_assets.training.arena_base import (CARD, SERVED_LOOKS, browsing_texts, learn_picking,
                                                        picked_id_positions, picking_conversation, picking_text)
    from shopdistill_assets.training.tiny_model import (ID_KEY_PIECES, build_small_model, build_tokenizer,
                                                        fixed_prompt_pieces)

    catalog, problems = heldout_arena
    catalog_dir = tmp_path / "catalog"
    write_catalog(catalog, catalog_dir / "documents.jsonl.gz")
    base = build_small_model(tmp_path / "random", browsing_texts(catalog_dir, 6, 0, build_tokenizer(vocab_size=300)),
                             size="h128l4", vocab_size=1200, identity=True, key_pieces=ID_KEY_PIECES,
                             whole_pieces=fixed_prompt_pieces())  # as distill.py builds it: the served prompt is short
    tokenizer = AutoTokenizer.from_pretrained(base)
    conversation = picking_conversation(sorted(catalog, key=lambda p: p["product_id"]), Sandbox(catalog),
                                        random.Random(4), pages=6, max_results=4, dense=True, looks=SERVED_LOOKS)
    calls = [m["tool_calls"][0]["function"] for m in conversation if m.get("tool_calls")]
    assert {c["name"] for c in calls} == set(SERVED_LOOKS)  # views and recommendations, drawn per look
    looked = [json.loads(c["arguments"])["product_ids"] for c in calls]
    for served in (False, True):  # learn_picking's two renderings
        text = picking_text(tokenizer, conversation, served)
        assert (SYSTEM_PROMPT in text) is served
        ids, written = picked_id_positions(tokenizer, text, 4096)
        assert looked and [tokenizer.decode([ids[i] for i in positions]).strip() for positions in written] == looked
        assert len(ids) > 20 * sum(len(w) for w in written)  # the pages are context, not loss
        assert {tokenizer.decode([ids[w[0] - 1]]) for w in written} == {ID_KEY_PIECES[2]}  # the call's key, one token

    picking = learn_picking(base, catalog_dir, tmp_path / "picked", curriculum=((1, 2, 3), (2, 1, 2)), measure=3,
                            max_length=2048, looks=SERVED_LOOKS, served=True)
    assert [(p["pages"], p["batch"], p["steps"]) for p in picking["phases"]] == [(1, 2, 3), (2, 1, 2)]
    assert all(p["tokens"] > 0 and 0.0 <= p["whole_id_right"] <= p["first_token_right"] <= 1.0 for p in picking["phases"])
    card = json.loads((tmp_path / "picked" / CARD).read_text())["picking"]
    assert card["learning_rate"] == 5e-4 and card["looks"] == list(SERVED_LOOKS) and card["served"] is True
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "picked").config.hidden_size == 128

    # until: more phases like the last while its pick is below the share, within the extra steps allowed
    more = learn_picking(base, catalog_dir, tmp_path / "more", curriculum=((1, 1, 2),), measure=3, max_length=2048,
                         until=(1.01, 2, 5))  # a share never reached: chunks of 2 until 5 extra steps would pass
    assert [(p["pages"], p["steps"], p.get("extra", False)) for p in more["phases"]] == [
        (1, 2, False), (1, 2, True), (1, 2, True)]
    assert json.loads((tmp_path / "more" / CARD).read_text())["picking"]["until"] == [1.01, 2, 5]
    none = learn_picking(base, catalog_dir, tmp_path / "none", curriculum=((1, 1, 2),), measure=3, max_length=2048,
                         until=(0.0, 2, 5))  # reached at once: no extra phase
    assert len(none["phases"]) == 1


def test_the_recommend_phase_learns_the_served_last_step_of_given_problems_only(heldout_arena, tmp_path):
    """learn_recommending: the fair policy's recommend_product calls on the problems it is given,
    served as evaluated, loss on the recommended ids only (nothing when the call is cut off); every
    tenth problem kept back and measured; the phase steps and records itself in the card."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from shopdistill_assets.agent.rollout import SYSTEM_PROMPT
    from shopdistill_assets.sandbox import write_catalog
    from shopdistill_assets.sandbox.tool_specs import tool_schemas
    from shopdistill_assets.evaluation.step_match import recommend_conversations, teacher_conversations
    from shopdistill_assets.training.arena_base import (CARD, browsing_texts, call_value_positions,
                                                        learn_recommending, recommended_id_positions)
    from shopdistill_assets.training.tiny_model import (ID_KEY_PIECES, build_small_model, build_tokenizer,
                                                        fixed_prompt_pieces)

    catalog, problems = heldout_arena
    given = problems[:8]
    conversations = recommend_conversations(given, catalog)
    assert conversations and {pid for pid, _ in conversations} <= {p.problem_id for p in given}
    assert all(c[0] == {"role": "system", "content": SYSTEM_PROMPT} and c[1]["role"] == "user"
               and c[-1]["tool_calls"][0]["function"]["name"] == "recommend_product" for _, c in conversations)
    catalog_dir = tmp_path / "catalog"
    write_catalog(catalog, catalog_dir / "documents.jsonl.gz")
    base = build_small_model(tmp_path / "random", browsing_texts(catalog_dir, 6, 0, build_tokenizer(vocab_size=300)),
                             size="h128l4", vocab_size=1200, identity=True, key_pieces=ID_KEY_PIECES,
                             whole_pieces=fixed_prompt_pieces())
    tokenizer = AutoTokenizer.from_pretrained(base)
    several = False  # one id a list of positions, also where a call recommends several
    for _, conversation in conversations:
        text = tokenizer.apply_chat_template(conversation, tools=tool_schemas(), tokenize=False)
        ids, groups = recommended_id_positions(tokenizer, text, 8192)
        recommended = json.loads(conversation[-1]["tool_calls"][0]["function"]["arguments"])["product_ids"]
        assert [tokenizer.decode([ids[i] for i in g]).strip() for g in groups] == [r.strip() for r in recommended.split(",")]
        assert groups[-1][-1] < len(ids) - 1 and len(ids) > 10 * sum(map(len, groups))  # the prefix is context, not loss
        assert recommended_id_positions(tokenizer, text, groups[0][0])[1] == []  # cut off: no loss, no wrong target
        several = several or len(groups) > 1

    searches = [(pid, c) for pid, name, c in teacher_conversations(given, catalog, ("find_product",))]
    assert searches and all(c[-1]["tool_calls"][0]["function"]["name"] == "find_product" for _, c in searches)
    for _, conversation in searches:  # each argument value, and the token that closes it
        text = tokenizer.apply_chat_template(conversation, tools=tool_schemas(), tokenize=False)
        ids, groups = call_value_positions(tokenizer, text, 8192)
        arguments = json.loads(conversation[-1]["tool_calls"][0]["function"]["arguments"])
        written = [str(v) for v in arguments.values() if str(v)]
        assert [tokenizer.decode([ids[i] for i in g[:-1]]).strip(' "') for g in groups] == written
        assert all(g[-1] == g[-2] + 1 for g in groups) and groups[-1][-1] < len(ids) - 1
        assert call_value_positions(tokenizer, text, groups[0][0])[1] == []

    card = learn_recommending(base, conversations, tmp_path / "recommending", steps=3, batch=2, max_length=8192,
                              sources={"test": True}, searches=searches, measure_steps=1)
    search = card["searching"]
    assert search["steps_learned_from"] + search["kept_back"]["steps"] == len(searches) and search["tokens"] > 0
    assert 0.0 <= search["kept_back"]["whole_value_right_after"] <= search["kept_back"]["first_token_right_after"]
    kept = card["kept_back"]
    assert card["steps"] == 3 and card["tokens"] > 0 and card["steps_learned_from"] + kept["steps"] == len(conversations)
    assert kept["problems"] == len(sorted({pid for pid, _ in conversations})[::10]) and kept["steps"] >= 1
    assert several and kept["ids"] >= kept["steps"]
    assert 0.0 <= kept["whole_id_right_after"] <= kept["first_token_right_after"] <= 1.0
    pieces = kept["pieces_right_after"]  # each piece's share: the first is the first token's, every one bounds the whole
    assert 1 <= len(pieces) <= 4 and pieces[0] == kept["first_token_right_after"] and all(
        kept["whole_id_right_after"] <= p <= 1.0 for p in pieces)
    assert [c["step"] for c in kept["curve"]] == [1, 2] and all(  # measured along the way, not at the end again
        set(c) == {"step", "first_token_right", "whole_id_right", "pieces_right"} for c in kept["curve"])
    written = json.loads((tmp_path / "recommending" / CARD).read_text())["recommending"]
    assert written["sources"] == {"test": True} and "no held-out problem" in written["note"]
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "recommending").config.hidden_size == 128

    renamed = learn_recommending(base, conversations, tmp_path / "renamed", steps=2, batch=2, max_length=8192,
                                 rename_ids=1.0, searches=searches, rename_words=1.0)
    assert renamed["renamed_ids"]["share"] == 1.0 and renamed["renamed_ids"]["pool"] >= 10 and renamed["kept_back"] == {**{k: v for k, v in kept.items() if k != "curve"}, **{
        k: v for k, v in renamed["kept_back"].items() if k.endswith("_after")}}  # measured as served, same rows
    words = renamed["searching"]
    assert words["renamed_words"]["share"] == 1.0 and words["renamed_words"]["pool"] >= 10 and words["tokens"] > 0
    assert words["kept_back"]["steps"] == search["kept_back"]["steps"]

    later = learn_recommending(tmp_path / "renamed", conversations, tmp_path / "later", steps=1, batch=2, max_length=8192,
                               lr=3e-4, rename_ids=1.0)  # a second part, on the first part's model
    continued = json.loads((tmp_path / "later" / CARD).read_text())
    assert continued["recommending"]["learning_rate"] == 3e-4 and "searching" not in continued["recommending"]
    assert [r["steps"] for r in continued["recommending_earlier"]] == [2] and continued["recommending_earlier"][0][
        "searching"]["renamed_words"]["share"] == 1.0 and later["kept_back"]["whole_id_right_before"] == renamed[
        "kept_back"]["whole_id_right_after"]  # the same kept-back rows, measured on the model the first part left

    # --recommending-until: part 1 again, a chunk at a time on the model the last chunk left, while the
    # kept-back whole id is under the share and the extra steps, the pick's counted in, stay within MOST
    distill = _benchmark("distill")
    gate = distill.parse_args(["--recommending-until", "1.01", "1", "3", "--out", str(tmp_path)])
    picked = distill.phase_folder(gate, tmp_path, "-picking")
    picked.mkdir(parents=True)
    (picked / CARD).write_text(json.dumps({"picking": {"phases": [{"steps": 9}, {"steps": 1, "extra": True}]}}))
    chunks = []

    def again(on, out, steps, seed, note):
        chunks.append((on.name, out.name, steps, seed, note))
        return learn_recommending(on, conversations, out, steps=steps, batch=2, max_length=8192, seed=seed)

    last, extra = distill.recommended_until(gate, tmp_path, tmp_path / "later", later, again)
    prefix = distill.phase_folder(gate, tmp_path, "").name
    assert extra == 2 and chunks == [  # 1 extra pick step + 2 = MOST: no third chunk; each its own seed
        ("later", f"{prefix}-recommending-part1-more1", 1, gate.seed + 1, "1 more steps: whole id under 1.01"),
        (f"{prefix}-recommending-part1-more1", f"{prefix}-recommending-part1-more2", 1, gate.seed + 2,
         "2 more steps: whole id under 1.01")] and last.name == chunks[-1][1]
    gated = json.loads((last / CARD).read_text())
    assert gated["recommending"]["until"] == {"share": 1.01, "chunk": 1, "most": 3, "pick_extra_steps": 1,
                                              "extra_steps": 2}
    assert [r["steps"] for r in gated["recommending_earlier"]] == [2, 1, 1] and "part 1 again: whole id under 1.01" in (
        distill._part_note(gated["recommending_earlier"][-1]))
    reached = distill.parse_args(["--recommending-until", "0.0", "1", "3", "--out", str(tmp_path)])
    assert distill.recommended_until(reached, tmp_path, tmp_path / "later", later, again) == (tmp_path / "later", 0)


def test_renamed_ids_rename_each_shown_id_everywhere_and_nothing_else():
    """The recommend phase's renaming: every id a page shows becomes a distinct id of the pool in the
    results and in the calls alike, so the choice is unchanged and the id must be copied; shop ids,
    prices and a number that only contains an id are left as they are."""
    import random
    import re

    from shopdistill_assets.training.arena_base import renamed_ids

    page = json.dumps([{"product_id": "5035687794", "shop_id": "3015838", "price": 4.0},
                       {"product_id": "1203456789", "shop_id": "3015838", "title": "bag 15035687794"}])
    text = (f'<tool_response>{page}</tool_response><tool_call>{{"name": "view_product_information", "arguments": '
            f'{{"product_id": "1203456789"}}}}</tool_call><tool_call>{{"name": "recommend_product", "arguments": '
            f'{{"product_ids": "1203456789,5035687794"}}}}</tool_call>')
    pool = [f"90000000{i:02d}" for i in range(20)]
    out = renamed_ids(text, pool, random.Random(0))
    shown = re.findall(r'"product_id": "(\d+)"', out)
    first, second = shown[0], shown[1]
    assert {first, second} <= set(pool) and first != second and "5035687794" not in out.replace("15035687794", "")
    assert shown[2] == second and f'"product_ids": "{second},{first}"' in out  # the call names the same results
    assert out.count("3015838") == 2 and "4.0" in out and "bag 15035687794" in out
    assert renamed_ids(text, pool[:1], random.Random(0)) == text  # a pool too small to rename from: as served

    # the same seed renames alike in every process (a set's order follows the process's string hashes)
    script = ("import json, random, sys; from shopdistill_assets.training.arena_base import renamed_ids; "
              "text, pool = json.load(sys.stdin); print(renamed_ids(text, pool, random.Random(0)))")
    outs = {subprocess.run([sys.executable, "-c", script], input=json.dumps([text, pool]), capture_output=True, text=True,
                           cwd=REPO, env={**os.environ, "PYTHONHASHSEED": str(hashes)}, check=True).stdout
            for hashes in range(6)}
    assert outs == {out + "\n"}


def test_renamed_words_rename_what_the_search_copies_from_the_request_everywhere_after_the_prompt():
    """The search rows' renaming: each word the last call copies from the request becomes another
    word of the pool, in the request, the tool results and the calls alike, and each copied number
    another number of as many digits with the order kept (a range stays a range); the system prompt,
    the words the call does not copy and the words kept (service cues) are left as they are."""
    import random

    from shopdistill_assets.training.arena_base import copied_words, renamed_words

    def call(name, arguments):
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}

    conversation = [
        {"role": "system", "content": "You shop. Use find_product with a tefal query."},
        {"role": "user", "content": "Find me a Tefal waist bag, priced between 318 and 1200 PHP, that ships for free."},
        call("find_product", {"q": "tefal bag", "page": 1}),
        {"role": "tool", "content": json.dumps([{"product_id": "318", "title": "Tefal waist bag", "price": 1200}])},
        call("find_product", {"q": "tefal waist bag", "page": 1, "price": "318-1200", "service": "freeShipping"}),
    ]
    keep = {"free", "ships"}
    assert copied_words(conversation, keep) == {"tefal", "waist", "bag", "318", "1200"}
    out = renamed_words(conversation, ["zebra", "kettle", "nylon", "lenovo"], random.Random(0), keep)
    assert out[0] == conversation[0]  # the prompt as served
    q = json.loads(out[4]["tool_calls"][0]["function"]["arguments"])
    low, high = q["price"].split("-")
    assert len(low) == 3 and len(high) == 4 and int(low) < int(high)
    brand, waist, bag = q["q"].split()
    assert {brand, waist, bag} <= {"zebra", "kettle", "nylon", "lenovo"} and len({brand, waist, bag}) == 3
    assert out[1]["content"] == (f"Find me a {brand} {waist} {bag}, priced between {low} and {high} PHP, "
                                 "that ships for free.")
    assert json.loads(out[3]["content"]) == [{"product_id": low, "title": f"{brand} {waist} {bag}", "price": int(high)}]
    assert json.loads(out[2]["tool_calls"][0]["function"]["arguments"])["q"] == f"{brand} {bag}"
    assert q["service"] == "freeShipping"
    assert renamed_words(conversation, ["zebra"], random.Random(0), keep) == conversation  # a pool too small


def test_an_induction_batch_is_ordinary_tokens_written_twice():
    import torch

    from shopdistill_assets.training.arena_base import induction_batch
    from shopdistill_assets.training.tiny_model import build_arena_tokenizer

    tokenizer = build_arena_tokenizer(["a logitech bag"] * 5, vocab_size=400)
    rows = induction_batch(tokenizer, torch.Generator().manual_seed(0), batch=3, half=20)
    assert rows.shape == (3, 40) and torch.equal(rows[:, :20], rows[:, 20:])  # each row written twice
    assert not set(rows.flatten().tolist()) & set(tokenizer.all_special_ids)
    assert not torch.equal(rows[0], rows[1])  # random rows, not one row repeated


def test_id_key_pieces_are_one_token_each_in_compact_and_spaced_json():
    from shopdistill_assets.training.tiny_model import ID_KEY_PIECES, build_arena_tokenizer

    tokenizer = build_arena_tokenizer(["a logitech bag"] * 5, vocab_size=1200, identity=True, key_pieces=ID_KEY_PIECES)
    page = [{"product_id": "5035687794", "price": 4.0}, {"product_id": "1203456789"}]
    call = {"product_ids": "5035687794"}
    for text in (json.dumps(page), json.dumps(page, separators=(",", ":")), json.dumps(call)):
        pieces = [tokenizer.decode([i]) for i in tokenizer(text)["input_ids"]]
        assert [p for p in pieces if p in ID_KEY_PIECES] == [p for p in ID_KEY_PIECES if p in text.replace(" ", "")]
        assert pieces[pieces.index(next(p for p in pieces if p in ID_KEY_PIECES)) + 1] == "503"  # the id follows


def _benchmark(name: str):
    """benchmarks/{name}.py as a module (a script, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{name}_script", Path(__file__).parents[1] / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_corpus_loss_files_each_token_by_where_it_stands():
    """benchmarks/corpus_loss.py: think text, a find_product call's q value (its first token apart),
    other call tokens and everything else; another tool's arguments are call tokens, not a query."""
    kinds_of = _benchmark("corpus_loss").token_kinds
    call = '<tool_call>{"name": "find_product", "arguments": {"q": "tefal pan"}}</tool_call>'
    view = '<tool_call>{"name": "view_product_information", "arguments": {"q": "x"}}</tool_call>'
    text = f"a pan<think>cheap</think>{call} ok {view}"
    kinds = dict(zip(range(len(text)), kinds_of(text, [(i, i + 1) for i in range(len(text))]), strict=True))
    q = text.index("tefal")
    assert kinds[q] == "q_first" and {kinds[i] for i in range(q + 1, q + len("tefal pan"))} == {"q"}
    assert [kinds[i] for i in range(text.index("cheap"), text.index("cheap") + 5)] == ["think"] * 5
    assert kinds[0] == "other" and kinds[text.index(" ok ") + 1] == "other"
    assert kinds[text.index("find_product")] == "call" and kinds[text.index('"x"') + 1] == "call"
    assert list(kinds.values()).count("q_first") == 1


def test_distill_names_its_base_phases_and_the_renaming_in_the_base_note(tmp_path):
    """distill.py: renaming the search rows' words needs the search rows; `--reuse-base` finds the
    phase before a missing recommend phase by the flags; the report's base note names each phase and
    what it renamed."""
    from shopdistill_assets.training.arena_base import CARD

    distill = _benchmark("distill")
    with pytest.raises(SystemExit):
        distill.parse_args(["--recommending-rename-words", "1.0"])
    args = distill.parse_args(["--recommending-searches", "--recommending-rename-words", "1.0", "--out", str(tmp_path)])
    assert distill.base_folder(args, tmp_path).name.endswith("-recommending")
    assert distill.base_folder(args, tmp_path, before="-recommending") == distill.phase_folder(args, tmp_path, "-picking")
    no_phases = distill.parse_args(["--no-picking", "--recommending-steps", "0", "--out", str(tmp_path)])
    assert distill.base_folder(no_phases, tmp_path) == distill.phase_folder(no_phases, tmp_path, "")

    for wrong in (["--recommending-then", "300,ids=1", "--recommending-steps", "0"], ["--recommending-then", "300,words=1", "--recommending-steps", "5"],
                  ["--recommending-then", "300,ids=2", "--recommending-steps", "5"],
                  ["--recommending-then", "many", "--recommending-steps", "5"],
                  ["--recommending-then", "300,speed=1", "--recommending-steps", "5"]):
        with pytest.raises(SystemExit):
            distill.parse_args(wrong)
    recipe = distill.parse_args(["--recommending-steps", "1600", "--recommending-rename-ids", "1.0", "--recommending-then",
                                 "400,searches,ids=1,words=1", "--recommending-then", " 300, ids=1, lr=3e-4"])
    assert distill.recommend_parts(recipe) == [
        {"steps": 1600, "searches": False, "lr": 1e-3, "rename_ids": 1.0, "rename_words": 0.0},
        {"steps": 400, "searches": True, "lr": 1e-3, "rename_ids": 1.0, "rename_words": 1.0},
        {"steps": 300, "searches": False, "lr": 3e-4, "rename_ids": 1.0, "rename_words": 0.0}]
    assert distill._recommending_phase(recipe) == "recommending in 3 parts" and distill.recommend_parts(no_phases) == []
    quick = distill.parse_args(["--quick", "--recommending-then", "300,ids=1"])
    assert [part["steps"] for part in distill.recommend_parts(quick)] == [4, 4]
    assert distill.parse_args(["--picking-until", "0.5", "250", "1000"]).picking_until == (0.5, 250, 1000)
    for wrong in (["0.5", "250.5", "1000"], ["0.5", "2000", "1000"], ["0.5", "0", "10"]):
        with pytest.raises(SystemExit):
            distill.parse_args(["--picking-until", *wrong])
    assert distill.parse_args([]).picking_until == (0.5, 250, 1000)  # the default: a pick that did not form goes on
    assert distill.parse_args(["--no-picking-until"]).picking_until is None
    assert distill.parse_args(["--quick"]).picking_until is None and distill.parse_args([]).sft_steps == 3600
    for given in (["--quick", "--picking-until", "0.5", "250", "1000"], ["--picking-until", "0.5", "250", "1000",
                                                                        "--quick"]):  # given: held, as the default too
        assert distill.parse_args(given).picking_until == (0.5, 250, 1000)
    assert distill.parse_args(["--quick", "--recommending-until", "0.35", "300", "1000"]).recommending_until == (
        0.35, 300, 1000)
    until = distill.parse_args(["--picking-until", "0.5", "250", "1000", "--out", str(tmp_path)])
    distill.gates_as_flags(until, tmp_path)  # no saved pick base: nothing to check
    saved = distill.phase_folder(until, tmp_path, "-picking")
    saved.mkdir(parents=True)
    (saved / CARD).write_text(json.dumps({"picking": {"phases": []}}))  # built without --picking-until
    with pytest.raises(SystemExit, match="built with --picking-until [(]off[)], not 0.5 250 1000"):
        distill.gates_as_flags(until, tmp_path)
    distill.gates_as_flags(distill.parse_args(["--no-picking-until", "--out", str(tmp_path)]), tmp_path)
    (saved / CARD).write_text(json.dumps({"picking": {"until": [0.5, 250, 1000]}}))
    distill.gates_as_flags(until, tmp_path)
    with pytest.raises(SystemExit, match="built with --picking-until 0.5 250 1000, not [(]off[)]"):
        distill.gates_as_flags(distill.parse_args(["--no-picking-until", "--out", str(tmp_path)]), tmp_path)
    assert distill.parse_args([]).recommending_until == (0.35, 300, 1000)  # part 1 goes on while the id is not copied
    assert distill.parse_args(["--quick"]).recommending_until is None and distill.parse_args(
        ["--quick", "--recommending-until", "1.01", "2", "4"]).recommending_until == (1.01, 2, 4)  # given: kept
    with pytest.raises(SystemExit):
        distill.parse_args(["--recommending-until", "0.3", "400", "300"])
    recommended = distill.phase_folder(until, tmp_path, "-recommending")
    recommended.mkdir(parents=True)
    (recommended / CARD).write_text(json.dumps({"recommending": {}}))  # built before the gate
    with pytest.raises(SystemExit, match="built with --recommending-until [(]off[)], not 0.35 300 1000"):
        distill.gates_as_flags(until, tmp_path)
    distill.gates_as_flags(distill.parse_args(["--no-recommending-until", "--out", str(tmp_path)]), tmp_path)
    (recommended / CARD).write_text(json.dumps({"recommending_until": {"until": [0.35, 300, 1000], "extra_steps": 0}}))
    distill.gates_as_flags(until, tmp_path)
    default = distill.recommend_parts(distill.parse_args([]))  # run13's recipe (part 1 at 1,600 steps since run20)
    assert [(p["steps"], p["searches"], p["rename_ids"], p["rename_words"], p["lr"]) for p in default] == [
        (1600, False, 1.0, 0.0, 1e-3), (400, True, 1.0, 1.0, 1e-3), (300, False, 1.0, 0.0, 3e-4)]
    assert [p["steps"] for p in distill.recommend_parts(distill.parse_args(["--recommending-then", "none"]))] == [1600]

    kept = {"first_token_right_after": 0.9, "whole_id_right_after": 0.3}
    card = {"recommending": {"problems": 40, "steps": 1600, "batch": 4, "kept_back": kept,
                             "renamed_ids": {"share": 1.0, "pool": 2766},
                             "searching": {"steps_learned_from": 930, "renamed_words": {"share": 0.5, "pool": 191},
                                           "kept_back": {"whole_value_right_after": 0.35}}}}
    checkpoint = tmp_path / "base"
    checkpoint.mkdir()
    (checkpoint / CARD).write_text(json.dumps(card))
    note = distill.base_note(args, str(checkpoint))
    assert ("recommend steps of 40 train-side problems (1600 steps x 4; first token right on kept-back ones 0.9, "
            "whole id 0.3; ids of 1.0 of the rows renamed each draw)") in note
    assert "(930 rows; whole argument value right on kept-back ones 0.35; words of 0.5 of the rows renamed each draw)" in note
    assert distill.renamed_note(card["recommending"]["searching"]["renamed_words"], "words") == (
        "; 0.5 of the rows' words renamed from a pool of 191")
    assert "earlier part" not in note
    card["recommending_earlier"] = [
        {"steps": 1600, "batch": 4, "learning_rate": 1e-3, "renamed_ids": {"share": 1.0, "pool": 2766}},
        {"steps": 400, "batch": 4, "learning_rate": 1e-3, "renamed_ids": {"share": 1.0, "pool": 2766},
         "searching": {"steps_learned_from": 930, "renamed_words": {"share": 1.0, "pool": 191}}}]
    (checkpoint / CARD).write_text(json.dumps(card))
    assert ("each draw after 2 earlier part(s): 1600 steps x 4 at 0.001, ids of 1.0 of the rows renamed; 400 steps x 4 "
            "at 0.001 with 930 search rows, ids of 1.0 and words of 1.0 of the rows renamed)") in distill.base_note(
                args, str(checkpoint))


def test_the_report_says_how_episodes_were_sampled(tmp_path):
    """The sampling a report states is read from the base's generation_config.json: a tiny Qwen3 ships
    Qwen3's top_p / top_k; a base without them samples untruncated, and the report says so."""
    from shopdistill_assets.training.tiny_model import build_tiny_model

    distill = _benchmark("distill")
    path = build_tiny_model(tmp_path / "qwen3-tiny")
    assert "temperature 0.6, top_p 0.95, top_k 20" in distill.sampling_note(str(path))
    (path / "generation_config.json").unlink()
    assert "no top_p / top_k" in distill.sampling_note(str(path))
