"""A base that has read the arena: a short pretraining phase of a randomly initialised small Qwen3
on arena text, standing in for the pretrained language model a real run starts from.

A pretrained model arrives able to read and to copy: it has seen text that repeats itself and
learned to attend to what came before. A random model has not, and the trajectories alone teach
copying slowly (an id is copied once or twice in 1,500 tokens). So the base reads, with loss on
every token:
  - browsing transcripts of the catalogue (`browsing_texts`): a line naming a catalogue product,
    find_product searches made of words of that line, the result pages the sandbox returns, and
    view_product_information calls on the first results' ids; every id and search word is a copy
    of something earlier in the text. They are built from the catalogue and the sandbox alone:
    no problem, no request, no answer, held-out or not;
  - train-side trajectories (`train_corpus` rows), whole, tool results included.
Then, optionally (`learn_picking`), the choice behind most of the arena's recommendations: the
first result of the last page, taught on picking transcripts with one page before each look, then
two, then four (benchmarks/pick_probe.py: not learned otherwise on CPU); and (`learn_recommending`)
that choice where the evaluation asks for it: the fair policy's recommend_product steps on
train-side problems (`evaluation.step_match.recommend_conversations`), in the conversation the
policy is served, loss on the recommended ids.
It is part of the base, reported as such (`arena_pretraining.json` beside the weights), and sees
no held-out problem: the corpus rows and the recommend steps' problems come from the train side of
the split, the pages from the catalogue every agent searches.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

CARD = "arena_pretraining.json"
BROWSE_PROMPT = "Browse the catalogue: {}."


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))}}


def browsing_conversation(products: list[dict[str, Any]], sandbox: Any, rng: random.Random,
                          searches: int = 2) -> list[dict[str, Any]]:
    """One browsing transcript: a product's title named, searches made of its words, their pages,
    and a look at the first results (ids copied from the page, in page order)."""
    named = products[rng.randrange(len(products))]
    words = str(named.get("title") or "").lower().split()
    messages: list[dict[str, Any]] = [{"role": "user", "content": BROWSE_PROMPT.format(" ".join(words))}]
    for n in range(searches):
        picked = sorted(rng.sample(range(len(words)), min(len(words), rng.randint(2, 4))))  # in the line's order
        q = " ".join(words[i] for i in picked) or "product"
        call = _call(f"call_{2 * n}", "find_product", {"q": q, "page": 1})
        page = sandbox.call("find_product", {"q": q, "page": 1}).content()
        messages += [{"role": "assistant", "content": "", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(page, ensure_ascii=False)}]
        if not isinstance(page, list) or not page:
            continue
        ids = ",".join(str(p["product_id"]) for p in page[: rng.randint(1, min(3, len(page)))])
        view = _call(f"call_{2 * n + 1}", "view_product_information", {"product_ids": ids})
        info = sandbox.call("view_product_information", {"product_ids": ids}).content()
        messages += [{"role": "assistant", "content": "", "tool_calls": [view]},
                     {"role": "tool", "tool_call_id": view["id"], "content": json.dumps(info, ensure_ascii=False)}]
    return messages


def lr_scale(step: int, steps: int, warmup: int) -> float:
    """The base's schedule, a factor on the learning rate: linear warmup over `warmup` steps, then a
    cosine from 1 down to 0.1 at `steps`."""
    return min(1.0, step / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))


def picking_conversation(products: list[dict[str, Any]], sandbox: Any, rng: random.Random, pages: int = 4,
                         max_results: int = 10, dense: bool = False,
                         looks: tuple[str, ...] = ("view_product_information",)) -> list[dict[str, Any]]:
    """A denser browsing transcript: `pages` searches, each page cut to its first 1..`max_results`
    results (a page of the sandbox's own), and after each one a look at its first result. The
    place of the id to copy moves with the page's length, so only "the first id of the last page"
    predicts it, not a fixed distance back (the shortcut a fixed-length copy task teaches).
    `dense`: only the pages and the looks (no search call, no product page after the look), so
    a text holds a copy every ~150 tokens rather than every ~500. `looks`: the tool of each look,
    drawn per look (`product_ids` either way): a look that is a recommend_product call is the
    arena's own last step. Read (dense) by `learn_picking` and by benchmarks/pick_probe.py;
    browsing transcripts alone did not teach the choice (results/distill/README.md)."""
    named = products[rng.randrange(len(products))]
    messages: list[dict[str, Any]] = [{"role": "user", "content": BROWSE_PROMPT.format(
        " ".join(str(named.get("title") or "").lower().split()))}]
    for n in range(pages):
        words = str(products[rng.randrange(len(products))].get("title") or "").lower().split()
        q = " ".join(words[i] for i in sorted(rng.sample(range(len(words)), min(len(words), rng.randint(2, 3))))) or "product"
        page = sandbox.call("find_product", {"q": q, "page": 1}).content()
        if not isinstance(page, list) or not page:
            continue
        page = page[: rng.randint(1, min(max_results, len(page)))]
        call = _call(f"call_{2 * n}", "find_product", {"q": q, "page": 1})
        first = str(page[0]["product_id"])
        # one look tool draws nothing: the transcripts (and pick_probe's figures) stay those of before
        view = _call(f"call_{2 * n + 1}", looks[rng.randrange(len(looks))] if len(looks) > 1 else looks[0],
                     {"product_ids": first})
        look = [{"role": "tool", "tool_call_id": call["id"], "content": json.dumps(page, ensure_ascii=False)},
                {"role": "assistant", "content": "", "tool_calls": [view]}]
        if dense:
            messages += look
            continue
        info = sandbox.call(view["function"]["name"], {"product_ids": first}).content()
        messages += [{"role": "assistant", "content": "", "tool_calls": [call]}, *look,
                     {"role": "tool", "tool_call_id": view["id"], "content": json.dumps(info, ensure_ascii=False)}]
    return messages


# (pages before each look, transcripts a step, steps): benchmarks/pick_probe.py measured that the
# choice "the first result of the last page" forms at AdamW 5e-4 on one page and not from a fresh
# model on several, while a one-page model learns 2 and 4 pages in a few hundred steps.
PICKING_CURRICULUM: tuple[tuple[int, int, int], ...] = ((1, 16, 1000), (2, 8, 500), (4, 4, 500))
# Looks of both kinds, in the conversation the evaluation serves (`learn_picking(served=True,
# looks=SERVED_LOOKS)`, distill.py --picking-served): tried because the pick learned on view calls in
# bare transcripts reached the fair policy's held-out recommend_product steps weakly (run4); measured
# in run5 it was learned less (first token 0.345 after 4 pages, against 0.515) and reached those steps
# no better (results/distill/README.md), so the default stays the bare view calls.
SERVED_LOOKS = ("view_product_information", "recommend_product")
_TOOL_CALL = re.compile(r"<tool_call>.*?</tool_call>", re.S)
_PICKED = re.compile(r'"product_ids"\s*:\s*"([^"]*)"')
_ONE_ID = re.compile(r"[^,\s]+")  # an id of product_ids' comma-separated list


def _id_positions(text: str, offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[list[int]]:
    """The token positions of each id written in the product_ids `spans` of `text` (one list an id;
    an id cut off by the tokenizer's max_length keeps the positions it has, one wholly cut off none)."""
    groups = []
    for a, b in spans:
        for m in _ONE_ID.finditer(text, a, b):
            group = [i for i, (start, end) in enumerate(offsets) if end > start and m.start() <= start < m.end()]
            if group:
                groups.append(group)
    return groups


def picked_id_positions(tokenizer: Any, text: str, max_length: int) -> tuple[list[int], list[list[int]]]:
    """(token ids, the positions of each id a tool call writes): the loss of the picking phase."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"][:max_length], enc["offset_mapping"][:max_length]
    spans = [m.span(1) for call in _TOOL_CALL.finditer(text) for m in _PICKED.finditer(text, *call.span())]
    return ids, _id_positions(text, offsets, spans)


def picking_text(tokenizer: Any, conversation: list[dict[str, Any]], served: bool = False) -> str:
    """A picking transcript rendered with `tokenizer`'s chat template; `served`: after the
    evaluation's system prompt and with its tool schemas, as the policy will be served."""
    if not served:
        return tokenizer.apply_chat_template(conversation, tokenize=False)
    from shopdistill_assets.agent.rollout import SYSTEM_PROMPT
    from shopdistill_assets.sandbox.tool_specs import tool_schemas

    return tokenizer.apply_chat_template([{"role": "system", "content": SYSTEM_PROMPT}, *conversation],
                                         tools=tool_schemas(), tokenize=False)


def learn_picking(base: str | Path, catalog_dir: str | Path, out: str | Path, *,
                  curriculum: Iterable[tuple[int, int, int]] = PICKING_CURRICULUM, lr: float = 5e-4,
                  max_results: int = 10, max_length: int = 4096, seed: int = 0, measure: int = 50,
                  looks: tuple[str, ...] = ("view_product_information",), served: bool = False,
                  threads: int | None = None, log: Callable[[str], None] | None = None,
                  until: tuple[float, int, int] | None = None) -> dict[str, Any]:
    """The base learns to look at the first result of the last page: dense picking transcripts
    (`picking_conversation`) in phases of more pages before each look, loss on the ids the look
    calls write only, each phase warmup then cosine. `looks`: the look's tool, drawn per look;
    `served`: each transcript opens with the evaluation's system prompt and tool schemas, as the
    policy will be served (a few tokens with whole pieces). After each phase, the share of looks in
    `measure` fresh transcripts (another seed) whose id's first token is right, teacher forced.
    Catalogue only: no problem is read. Saves the model and tokenizer to `out` and records the
    phase in the card beside the weights (`picking`). `log` hears the loss every 100 steps.

    `until` = (share, chunk, most): while the last phase's first-token share is below `share`, one
    more phase like it of `chunk` steps (fresh transcripts), at most `most` extra steps in all: the
    pick forms in some draws within the curriculum and in others later (run16: 0.225 after it,
    0.51 after 1,000 more 4-page steps)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from shopdistill_assets.sandbox import load_catalog
    from shopdistill_assets.sandbox.tools import Sandbox

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    catalog = load_catalog(catalog_dir)
    sandbox, products = Sandbox(catalog), sorted(catalog, key=lambda p: p["product_id"])

    def encoded(n: int, pages: int, rng: random.Random) -> list[tuple[list[int], list[list[int]]]]:
        rows = []
        for _ in range(n):
            conversation = picking_conversation(products, sandbox, rng, pages=pages, max_results=max_results,
                                                dense=True, looks=looks)
            text = picking_text(tokenizer, conversation, served)
            ids, written = picked_id_positions(tokenizer, text, max_length)
            if written:
                rows.append((ids, written))
        return rows

    def more(phases: list[dict[str, Any]]) -> Iterable[tuple[int, int, int, int]]:
        yield from ((pages, batch, steps, 0) for pages, batch, steps in curriculum)
        extra = 0
        while until and phases and phases[-1]["first_token_right"] < until[0] and extra + until[1] <= until[2]:
            extra += until[1]
            yield phases[-1]["pages"], phases[-1]["batch"], until[1], extra

    phases: list[dict[str, Any]] = []
    started = time.monotonic()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    for pages, batch, steps, extra in more(phases):
        rng, losses, tokens = random.Random(f"{seed}-{pages}" + (f"-extra{extra}" if extra else "")), [], 0
        model.train()
        for step in range(1, steps + 1):
            for group in optimizer.param_groups:
                group["lr"] = lr * lr_scale(step, steps, 20)
            rows = encoded(batch, pages, rng)
            if not rows:
                continue
            losses.append(targeted_step(model, optimizer, [(ids, [p for w in written for p in w]) for ids, written in rows]))
            tokens += sum(len(ids) for ids, _ in rows)
            if log and step % 100 == 0:
                log(f"picking, {pages} page(s): step {step}/{steps}, loss {sum(losses[-100:]) / len(losses[-100:]):.3f}")
        tail = losses[-max(1, len(losses) // 10):]
        phases.append({"pages": pages, "batch": batch, "steps": steps, "tokens": tokens,
                       **({"extra": True} if extra else {}),
                       "final_loss": round(sum(tail) / len(tail), 4) if tail else None,
                       # the same transcripts after every phase of these pages: extra phases compare
                       **written_right(model, encoded(measure, pages, random.Random(f"measure-{seed}-{pages}")))})
    return _save_phase(model, tokenizer, base, out, "picking", {
        "learning_rate": lr, **({"until": list(until)} if until else {}), "max_results": max_results,
        "looks": list(looks), "served": served, "phases": phases,
        "seconds": round(time.monotonic() - started, 1),
        "note": "picking transcripts of the catalogue (a look at the first result of the last page), "
                "loss on the looked-at ids; part of the base; no problem read"})


def recommended_id_positions(tokenizer: Any, text: str, max_length: int) -> tuple[list[int], list[list[int]]]:
    """(token ids, the positions of each id the text's last tool call recommends, one list an id):
    nothing when `max_length` cuts that call off."""
    ids, offsets, call = _last_call(tokenizer, text, max_length)
    if call is None:
        return ids, []
    return ids, _id_positions(text, offsets, [m.span(1) for m in _PICKED.finditer(text, *call)])


def _last_call(tokenizer: Any, text: str,
               max_length: int) -> tuple[list[int], list[tuple[int, int]], tuple[int, int] | None]:
    """(token ids, their offsets, the span of the text's last tool call, None when there is none or
    `max_length` cuts it off)."""
    calls = list(_TOOL_CALL.finditer(text))
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"][:max_length], enc["offset_mapping"][:max_length]
    if not calls or not offsets or offsets[-1][1] < calls[-1].end():
        return ids, offsets, None
    return ids, offsets, calls[-1].span()


# a value of a tool call's arguments: a JSON string (its inside) or a number
_ARGUMENTS = re.compile(r'"arguments"\s*:\s*')
_VALUE = re.compile(r'"(?:[^"\\]|\\.)*"\s*:\s*(?:"((?:[^"\\]|\\.)*)"|(-?\d+(?:\.\d+)?))')


def call_value_positions(tokenizer: Any, text: str, max_length: int) -> tuple[list[int], list[list[int]]]:
    """(token ids, the positions of each argument value the text's last tool call writes, one list a
    value: the tokens that overlap it and the one that closes it, so a value is right only when it
    also ends where the teacher's did): the loss of the recommend phase's search rows. Nothing
    when `max_length` cuts that call off."""
    ids, offsets, call = _last_call(tokenizer, text, max_length)
    head = None if call is None else _ARGUMENTS.search(text, *call)
    if head is None:
        return ids, []
    groups = []
    for m in _VALUE.finditer(text, head.end(), call[1]):
        a, b = m.span(1) if m.group(1) is not None else m.span(2)
        inside = [i for i, (start, end) in enumerate(offsets) if end > start and start < b and end > a]
        after = next((i for i, (start, end) in enumerate(offsets) if end > start and start >= b), None)
        if inside and after is not None:
            groups.append([*inside, after])
    return ids, groups


# a catalogue id is 10 digits: four tokens, 3+3+3+1 digits (tiny_model.IDENTITY_SPLIT; 3+3+2+2 with
# IDENTITY_SPLIT_NO_LONE_DIGIT)
ID_PIECES = 4


def learn_recommending(base: str | Path, conversations: list[tuple[str, list[dict[str, Any]]]], out: str | Path, *,
                       steps: int, batch: int = 4, lr: float = 5e-4, max_length: int = 4096, seed: int = 0,
                       measure_every: int = 10, sources: dict[str, Any] | None = None, threads: int | None = None,
                       searches: list[tuple[str, list[dict[str, Any]]]] | None = None,
                       rename_ids: float = 0.0, rename_words: float = 0.0, measure_steps: int = 0,
                       log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The base learns the arena's last step where the evaluation asks for it: the fair policy's
    recommend_product calls on train-side problems (`evaluation.step_match.recommend_conversations`:
    (problem_id, conversation) pairs), rendered as the
    policy is served (system prompt, tool schemas), loss on the recommended ids only, AdamW warmup
    then cosine. The picking transcripts teach the choice in their own format and it barely reached
    these steps (results/distill/README.md, run4/run5); this phase trains it there. Every
    `measure_every`-th problem is held back and measured before and after (`written_right`: each
    recommended id's first token and the whole id, teacher forced, the units of pick_probe.py):
    train-side problems this phase never trained on. `searches`: the fair policy's find_product calls
    on the same problems, as (problem_id, conversation); each step then makes a second update on
    `batch` of them, loss on the call's argument values and the token that closes each
    (`call_value_positions`), measured the same way on the kept-back problems (a value's first token,
    the whole value) and recorded under `searching`. `rename_ids`: the share of drawn recommend rows
    whose product ids (tool results and the call alike) are renamed, each draw anew, to other ids the
    train rows show (`renamed_ids`): such an id cannot be recalled from memory, only copied from the
    page; the kept-back rows are measured as served. `rename_words`: the same for the search rows,
    the share of drawn ones whose words copied from the request are renamed (`renamed_words`), so
    the search's words must be copied from the request. `measure_steps` > 0 measures the kept-back
    ids every that many steps too (`kept_back.curve`, and a log line): the copy forms in some draws
    and not others (results/distill/README.md, seeds), and the curve shows which, early. Saves the
    model and tokenizer to `out` and records the phase in the card (`recommending`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from shopdistill_assets.agent.fair import SERVICE_WORDS
    from shopdistill_assets.sandbox.tool_specs import tool_schemas

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    problem_ids = sorted({pid for pid, _ in [*conversations, *(searches or [])]})
    kept_back = set(problem_ids[::measure_every]) if measure_every else set()

    def rows_of(pairs: list[tuple[str, list[dict[str, Any]]]],
                positions: Callable[..., Any]) -> tuple[list, list, list]:
        """(train rows, kept-back rows, the train rows' rendered texts)"""
        train: list[tuple[list[int], list[int]]] = []
        measured: list[tuple[list[int], list[list[int]]]] = []
        texts: list[str] = []
        for pid, conversation in pairs:
            text = tokenizer.apply_chat_template(conversation, tools=tool_schemas(), tokenize=False)
            if pid not in kept_back:
                texts.append(text)
            ids, groups = positions(tokenizer, text, max_length)
            if groups:
                (measured.append((ids, groups)) if pid in kept_back else
                 train.append((ids, [p for g in groups for p in g])))
        return train, measured, texts

    train, measured, texts = rows_of(conversations, recommended_id_positions)
    texts = texts if rename_ids else []  # renamed afresh each draw
    pool = sorted({i for text in texts for i in _PRODUCT_ID.findall(text)})
    search_train, search_measured, _ = rows_of(searches or [], call_value_positions)
    search_conversations = [c for pid, c in searches or [] if pid not in kept_back] if rename_words else []
    keep = ({w.lower() for w in _WORD.findall(json.dumps([tool_schemas(), SERVICE_WORDS]))}
            | {w.lower() for _, c in searches or [] for m in c if m.get("role") == "system"
               for w in _WORD.findall(str(m.get("content") or ""))}) if search_conversations else set()
    word_pool = sorted({w for c in search_conversations for w in copied_words(c, keep) if not w.isdigit()})
    if not train:
        raise ValueError("no recommend_product step to learn from (no train-side problem the fair policy answers)")
    started = time.monotonic()
    before = written_right(model, measured, pieces=ID_PIECES)
    search_before = written_right(model, search_measured, "value")
    curve: list[dict[str, Any]] = []
    rng, losses, search_losses, tokens, search_tokens = random.Random(seed), [], [], 0, 0
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    model.train()
    for step in range(1, steps + 1):
        for group in optimizer.param_groups:
            group["lr"] = lr * lr_scale(step, steps, min(20, steps))
        if texts:
            drawn = rng.sample(texts, min(batch, len(texts)))
            rows = [_row_of(recommended_id_positions(
                tokenizer, renamed_ids(text, pool, rng) if rng.random() < rename_ids else text, max_length))
                for text in drawn]
            rows = [row for row in rows if row[1]] or rng.sample(train, min(batch, len(train)))
        else:
            rows = rng.sample(train, min(batch, len(train)))
        losses.append(targeted_step(model, optimizer, rows))
        tokens += sum(len(ids) for ids, _ in rows)
        if search_conversations:
            drawn = rng.sample(search_conversations, min(batch, len(search_conversations)))
            rows = [_row_of(call_value_positions(tokenizer, tokenizer.apply_chat_template(
                renamed_words(c, word_pool, rng, keep) if rng.random() < rename_words else c,
                tools=tool_schemas(), tokenize=False), max_length)) for c in drawn]
            rows = [row for row in rows if row[1]] or rng.sample(search_train, min(batch, len(search_train)))
        elif search_train:
            rows = rng.sample(search_train, min(batch, len(search_train)))
        if search_train:
            search_losses.append(targeted_step(model, optimizer, rows))
            search_tokens += sum(len(ids) for ids, _ in rows)
        if log and step % 100 == 0:
            searched = f", searches {sum(search_losses[-100:]) / len(search_losses[-100:]):.3f}" if search_losses else ""
            log(f"recommending: step {step}/{steps}, loss {sum(losses[-100:]) / len(losses[-100:]):.3f}{searched}")
        if measure_steps and measured and step % measure_steps == 0 and step < steps:
            curve.append({"step": step, **written_right(model, measured, pieces=ID_PIECES)})
            if log:
                log(f"recommending: step {step}, kept back: first token {curve[-1]['first_token_right']}, whole id "
                    f"{curve[-1]['whole_id_right']}, by piece {curve[-1]['pieces_right']}")
    tail = losses[-max(1, len(losses) // 10):]
    search_tail = search_losses[-max(1, len(search_losses) // 10):]
    searching = {} if searches is None else {"searching": {
        "steps_learned_from": len(search_train), "tokens": search_tokens,
        **({"renamed_words": {"share": rename_words, "pool": len(word_pool)}} if rename_words else {}),
        "first_loss": round(search_losses[0], 4) if search_losses else None,
        "final_loss": round(sum(search_tail) / len(search_tail), 4) if search_tail else None,
        "kept_back": {"steps": len(search_measured), "values": sum(len(g) for _, g in search_measured),
                      **{f"{k}_before": v for k, v in search_before.items()},
                      **{f"{k}_after": v for k, v in written_right(model, search_measured, "value").items()}},
        "note": "the fair policy's find_product calls, loss on their argument values and each value's closing token"}}
    return _save_phase(model, tokenizer, base, out, "recommending", {
        "learning_rate": lr, "steps": steps, "batch": batch, "tokens": tokens,
        **({"renamed_ids": {"share": rename_ids, "pool": len(pool)}} if rename_ids else {}),
        "problems": len(problem_ids) - len(kept_back), "steps_learned_from": len(train),
        "first_loss": round(losses[0], 4) if losses else None,
        "final_loss": round(sum(tail) / len(tail), 4) if tail else None,
        "kept_back": {"problems": len(kept_back), "steps": len(measured), "ids": sum(len(g) for _, g in measured),
                      **{f"{k}_before": v for k, v in before.items()},
                      **{f"{k}_after": v for k, v in written_right(model, measured, pieces=ID_PIECES).items()},
                      **({"curve": curve} if curve else {})},
        **searching, "sources": sources or {}, "seconds": round(time.monotonic() - started, 1),
        "note": "the fair policy's recommend_product steps on train-side problems, served as evaluated, loss on "
                "the recommended ids; part of the base; no held-out problem read"})


_PRODUCT_ID = re.compile(r'"product_id"\s*:\s*"([^"\\]+)"')


def renamed_ids(text: str, pool: list[str], rng: random.Random) -> str:
    """`text` with each product id a tool result shows (`"product_id": "..."`) renamed, wherever it
    stands (results, calls), to a distinct id drawn from `pool`: the same page and choice with
    other ids, so the ids a call writes must be copied from the page, not recalled."""
    # a total order, not the set's: a set of strings iterates by the process's hash seed
    shown = sorted(set(_PRODUCT_ID.findall(text)), key=lambda i: (-len(i), i))
    if not shown or len(pool) < len(shown):
        return text
    mapping = dict(zip(shown, rng.sample(pool, len(shown)), strict=True))
    pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, shown)) + r")(?![\w-])")
    return pattern.sub(lambda m: mapping[m.group(1)], text)


_WORD = re.compile(r"[^\W_]+")


def _bounded(words: Iterable[str]) -> re.Pattern[str]:
    """A pattern for any of `words`, whole (not inside a longer word or number; `318` in `318-` is
    whole), case-insensitive."""
    return re.compile(r"(?<!\w)(" + "|".join(map(re.escape, sorted(words, key=len, reverse=True))) + r")(?!\w)",
                      re.IGNORECASE)


def copied_words(conversation: list[dict[str, Any]], keep: set[str]) -> set[str]:
    """The words (lower-cased) the conversation's last tool call writes in its string arguments that
    also stand, whole, in the request (the first user turn): what that call copies from the request.
    Words in `keep` (the prompt's and the tool schemas' own words) are left out."""
    request = next((str(m.get("content") or "") for m in conversation if m.get("role") == "user"), "")
    calls = [c for m in conversation for c in (m.get("tool_calls") or [])]
    if not calls or not request:
        return set()
    try:
        arguments = json.loads(calls[-1]["function"]["arguments"])
    except (ValueError, TypeError, KeyError):
        return set()
    values = [v for v in arguments.values() if isinstance(v, str)] if isinstance(arguments, dict) else []
    found = {w.lower() for v in values for w in _WORD.findall(v)} - keep
    return {w for w in found if _bounded([w]).search(request)}


def renamed_words(conversation: list[dict[str, Any]], pool: list[str], rng: random.Random,
                  keep: set[str] = frozenset()) -> list[dict[str, Any]]:
    """`conversation` with each word its last call copies from the request (`copied_words`) renamed
    wherever it stands after the system prompt (request, tool results, calls): a word to another word
    of `pool`, a number to another number of as many digits, the numbers' order kept (a price range
    stays a range). The same request and search with other words, so the call's words must be copied
    from the request, not recalled."""
    words = copied_words(conversation, keep)
    numbers = sorted((w for w in words if w.isdigit()), key=int)
    names = sorted(words - set(numbers))
    choices = [w for w in pool if w not in words]
    lengths = [len(w.lstrip("0") or "0") for w in numbers]
    if not words or len(choices) < len(names) or any(lengths.count(d) > 9 * 10 ** (d - 1) for d in lengths):
        return conversation
    mapping = dict(zip(names, rng.sample(choices, len(names)), strict=True))
    drawn: list[int] = []
    for number in numbers:
        digits = len(number.lstrip("0") or "0")
        value = -1
        while value < 0 or value in drawn:
            value = rng.randrange(10 ** (digits - 1) if digits > 1 else 0, 10 ** digits)
        drawn.append(value)
    mapping |= dict(zip(numbers, map(str, sorted(drawn)), strict=True))
    pattern = _bounded(words)

    def sub(text: str) -> str:
        return pattern.sub(lambda m: mapping[m.group(1).lower()], text)

    out = []
    for m in conversation:
        if m.get("role") == "system":
            out.append(m)
            continue
        m = dict(m)
        if isinstance(m.get("content"), str):
            m["content"] = sub(m["content"])
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "function": {**c["function"], "arguments": sub(c["function"]["arguments"])}}
                               for c in m["tool_calls"]]
        out.append(m)
    return out


def _row_of(encoded: tuple[list[int], list[list[int]]]) -> tuple[list[int], list[int]]:
    """(token ids, every loss position) from (token ids, each id's positions)."""
    ids, groups = encoded
    return ids, [p for g in groups for p in g]


def _save_phase(model: Any, tokenizer: Any, base: str | Path, out: str | Path, name: str,
                record: dict[str, Any]) -> dict[str, Any]:
    """Save a phase's model and tokenizer to `out`, with the base's card plus `record` under `name`.
    A phase run again on its own output (the recommend phase in parts) keeps the base's records of it,
    in order, under `{name}_earlier`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    card_path = Path(base) / CARD
    card = json.loads(card_path.read_text()) if card_path.is_file() else {"base": str(base)}
    if name in card:
        card[f"{name}_earlier"] = [*card.get(f"{name}_earlier", []), card[name]]
    card[name] = record
    (out / CARD).write_text(json.dumps(card, indent=2) + "\n")
    return record


def targeted_step(model: Any, optimizer: Any, rows: list[tuple[list[int], list[int]]]) -> float:
    """One update on `rows` (token ids, the positions whose tokens are the loss), right-padded into
    one batch; logits only where the loss is (the vocabulary projection dominates a small model's
    step otherwise). Returns the loss."""
    import torch

    x = torch.zeros((len(rows), max(len(ids) for ids, _ in rows)), dtype=torch.long)
    attention, target = torch.zeros_like(x), torch.zeros_like(x, dtype=torch.bool)
    for r, (ids, positions) in enumerate(rows):
        x[r, :len(ids)], attention[r, :len(ids)] = torch.tensor(ids), 1
        target[r, positions] = True
    hidden = model.model(input_ids=x, attention_mask=attention).last_hidden_state[:, :-1]
    at = target[:, 1:]
    loss = torch.nn.functional.cross_entropy(model.lm_head(hidden[at]), x[:, 1:][at])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def written_right(model: Any, rows: list[tuple[list[int], list[list[int]]]],
                  unit: str = "id", pieces: int = 0) -> dict[str, Any]:
    """Of the ids (or other `unit`s: argument values) written in `rows` (token ids, each one's
    positions), teacher forced, the share whose first token is the model's top guess
    (`first_token_right`: which result) and whose every token is (`whole_{unit}_right`: the copy
    after the choice too). `pieces` > 0 adds `pieces_right`: the share right at each of the first
    `pieces` token positions, each over the {unit}s that long (a 10-digit id is 3+3+3+1 digits: its
    last piece, a lone digit, is the one copy a token-in-context shortcut cannot make)."""
    import torch

    model.eval()
    first = whole = looks = 0
    at = [[0, 0] for _ in range(pieces)]
    with torch.no_grad():
        for ids, written in rows:
            guesses = model(input_ids=torch.tensor([ids])).logits[0].argmax(-1).tolist()
            for positions in written:
                right = [guesses[p - 1] == ids[p] for p in positions]
                first, whole, looks = first + right[0], whole + all(right), looks + 1
                for k, r in enumerate(right[:pieces]):
                    at[k][0], at[k][1] = at[k][0] + r, at[k][1] + 1
    model.train()
    shares: dict[str, Any] = {"first_token_right": round(first / looks, 4) if looks else None,
                              f"whole_{unit}_right": round(whole / looks, 4) if looks else None}
    if pieces:
        shares["pieces_right"] = [round(r / n, 4) for r, n in at if n]
    return shares


def browsing_texts(catalog_dir: str | Path, n: int, seed: int, renderer: Any) -> list[str]:
    """`n` browsing transcripts of the catalogue, rendered with `renderer`'s chat template."""
    from shopdistill_assets.sandbox import load_catalog
    from shopdistill_assets.sandbox.tools import Sandbox

    catalog = load_catalog(catalog_dir)
    sandbox = Sandbox(catalog)
    products = sorted(catalog, key=lambda p: p["product_id"])
    rng = random.Random(seed)
    return [renderer.apply_chat_template(browsing_conversation(products, sandbox, rng), tokenize=False)
            for _ in range(n)]


def pretraining_texts(corpus_texts: list[str], catalog_dir: str | Path, steps: int, seed: int, renderer: Any,
                      browsing_share: float = 0.5) -> list[str]:
    """`steps` texts: browsing transcripts and train-side trajectories, shuffled (seeded)."""
    n_browse = round(steps * browsing_share)
    rng = random.Random(seed)
    texts = browsing_texts(catalog_dir, n_browse, seed, renderer)
    if corpus_texts:
        texts += [corpus_texts[rng.randrange(len(corpus_texts))] for _ in range(steps - n_browse)]
    rng.shuffle(texts)
    return texts


def induction_batch(tokenizer: Any, generator: Any, batch: int = 16, half: int = 64) -> Any:
    """`batch` rows of `half` random ordinary tokens written twice: the second half can only be
    predicted by finding the token in the first half and copying the one after it (an induction
    head). No text at all: the copy circuit a pretrained model brings, formed in a few hundred steps."""
    import torch

    special = set(tokenizer.all_special_ids)
    ordinary = torch.tensor([i for i in range(len(tokenizer)) if i not in special])
    rows = ordinary[torch.randint(len(ordinary), (batch, half), generator=generator)]
    return torch.cat([rows, rows], dim=1)


def pretrain(base: str | Path, texts: Iterable[str], out: str | Path, *, lr: float = 2e-3, max_length: int = 3072,
             seed: int = 0, threads: int | None = None, sources: dict[str, Any] | None = None) -> dict[str, Any]:
    """One pass over `texts` (one text a step, loss on every token, AdamW, warmup then cosine);
    saves the model and tokenizer of `base` to `out` with the card; returns the card."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    texts = list(texts)
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    steps, warmup = len(texts), max(1, len(texts) // 20)
    tokens, losses, started = 0, [], time.monotonic()
    for step, text in enumerate(texts, 1):
        for group in optimizer.param_groups:
            group["lr"] = lr * lr_scale(step, steps, warmup)
        ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"][:max_length]])
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tokens += ids.shape[1]
        losses.append(loss.item())
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    head = losses[: max(1, len(losses) // 10)]
    tail = losses[-max(1, len(losses) // 10):]
    card = {"base": str(base), "steps": steps, "tokens": tokens, "learning_rate": lr, "max_length": max_length,
            "first_loss": round(sum(head) / len(head), 4) if head else None,
            "final_loss": round(sum(tail) / len(tail), 4) if tail else None,
            "seconds": round(time.monotonic() - started, 1), "sources": sources or {},
            "note": "pretraining of the random base on arena text (catalogue browsing transcripts and train-side "
                    "trajectories, loss on every token); part of the base; no held-out problem"}
    (out / CARD).write_text(json.dumps(card, indent=2) + "\n")
    return card
