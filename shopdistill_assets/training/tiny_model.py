"""A tiny Qwen3 causal LM with a locally trained BPE tokenizer, built offline in seconds.

Tests and the local demo need a real transformers checkpoint (chat template with tools, tool
calls, think blocks) without hub access. The weights are random: the model's output is
garbage, which is exactly what the evaluation's failure paths need to see. The training
stages reuse it as their starting checkpoint.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from shopdistill_assets.sandbox.tool_specs import TOOL_SCHEMAS

# Tokens the BPE trainer keeps whole: Qwen3's three control tokens, then its markup, which is text,
# not control ("special": false in Qwen3's tokenizer): decoding with skip_special_tokens=True, as
# TRL's GRPO trainer decodes completions for its reward functions, keeps the markup, so a
# completion's tool call is still there to be scored.
WHOLE_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>",
    "<tool_response>", "</tool_response>",
]
MARKUP_TOKENS = WHOLE_TOKENS[3:]


def _as_qwen3(bpe: Any) -> Any:
    """The trained BPE with the markup tokens (kept whole by the trainer) registered as text, and
    wrapped as a transformers tokenizer whose special tokens are Qwen3's control tokens only."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    bpe.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])  # same ids
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token=None, additional_special_tokens=["<|im_start|>"])

# Used only when TRL's copy of the original Qwen3 template is not installed: renders system,
# user, assistant (think + tool calls) and tool turns the way Qwen3 does, minus its edge cases.
FALLBACK_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n\n<tools>{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call><|im_end|>\n"
    "{%- elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' %}<|im_start|>user\n{{ m.content }}<|im_end|>\n"
    "{%- elif m.role == 'assistant' %}<|im_start|>assistant\n"
    "{%- if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}{{ m.content or '' }}"
    "{%- for tc in m.tool_calls or [] %}\n<tool_call>\n{\"name\": \"{{ tc.function.name }}\", \"arguments\": "
    "{% if tc.function.arguments is string %}{{ tc.function.arguments }}{% else %}{{ tc.function.arguments | tojson }}{% endif %}"
    "}\n</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)

_PHRASES = [
    "Find a hosport brand waist bag priced between 180 and 505 PHP.",
    "I need a 1.7 liter stainless steel electric kettle with automatic shut-off, below 1200 PHP.",
    "Recommend wireless earbuds with free shipping and cash on delivery from an official store.",
    "I want running shoes and a yoga mat from the same shop. My budget is 2000 PHP.",
    "I have a platform voucher: spend over 600, get 50 off. My budget is 640 PHP.",
    "The search returned 10 products; product 5035687794 costs 459.0 PHP and its brand is hosport.",
    "Compare the two candidates: the first is cheaper, the second has more sold_count.",
    "Let me view the product information to check the attributes and sku options.",
    "I will recommend the product that matches the brand, the price range and the color.",
]


def markup_as_text(path: str | Path) -> bool:
    """Migrate a tokenizer saved before the markup tokens were text (`MARKUP_TOKENS` special): re-save
    it at `path` with them as text, ids unchanged. True when it changed anything."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    special = set(tokenizer.all_special_tokens)
    if not special & set(MARKUP_TOKENS):
        return False
    fixed = _as_qwen3(tokenizer.backend_tokenizer)
    fixed.chat_template = tokenizer.chat_template
    fixed.save_pretrained(path)
    return True


def chat_template_text() -> str:
    """TRL's copy of the original Qwen3 chat template, or the minimal fallback."""
    try:
        return resources.files("trl").joinpath("chat_templates/qwen3.jinja").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        return FALLBACK_TEMPLATE


def _corpus() -> list[str]:
    lines = [json.dumps(schema) for schema in TOOL_SCHEMAS.values()]
    lines += [json.dumps(schema, indent=1) for schema in TOOL_SCHEMAS.values()]
    lines += _PHRASES * 8
    lines += [chat_template_text()]
    for name in TOOL_SCHEMAS:
        lines.append(f'<tool_call>\n{{"name": "{name}", "arguments": {{"product_ids": "5035687794,5035600001"}}}}\n</tool_call>')
    return lines


def build_tokenizer(vocab_size: int = 1024):
    """A byte-level BPE tokenizer trained on the tool schemas and shopping phrases."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=WHOLE_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(_corpus(), trainer=trainer)
    tokenizer = _as_qwen3(bpe)
    tokenizer.chat_template = chat_template_text()
    return tokenizer


def build_tiny_model(path: str | Path, seed: int = 0, vocab_size: int = 1024) -> Path:
    """Build and save (model + tokenizer) a tiny random-weight Qwen3 at `path`; returns it."""
    return _save_qwen3(Path(path), build_tokenizer(vocab_size), seed, hidden=64, layers=2, heads=4, kv_heads=2,
                       mlp=128, max_positions=16384)


QWEN3_SAMPLING = {"do_sample": True, "temperature": 0.6, "top_p": 0.95, "top_k": 20}


def _save_qwen3(path: Path, tokenizer, seed: int, *, hidden: int, layers: int, heads: int, kv_heads: int,
                mlp: int, max_positions: int) -> Path:
    """A randomly initialised Qwen3 of this shape (seeded), saved with `tokenizer` at `path`."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    eos_ids = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=hidden // heads,
        max_position_embeddings=max_positions, tie_word_embeddings=True, bos_token_id=None,
        eos_token_id=eos_ids[0], pad_token_id=eos_ids[1],
    )
    model = Qwen3ForCausalLM(config)
    # sampling as Qwen3's own checkpoints ship it (their generation_config.json), so a policy server
    # samples a tiny model as it would Qwen3-4B (hf_policy.HFPolicy.sampling)
    model.generation_config = GenerationConfig(eos_token_id=eos_ids, pad_token_id=eos_ids[1], **QWEN3_SAMPLING)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


# -- a small model that can learn the arena on CPU --------------------------------------------

# JSON written by orjson (the firehose) and by json.dumps (the rollouts) differ only in the
# spaces after separators; folding them makes one tool result one token sequence either way.
JSON_SPACING = (('": ', '":'), (', "', ',"'), ('}, {', '},{'))


# Identity copies: a word is letters alone, a number is digit groups of three, and each run of
# spaces and punctuation between them its own pre-token; so a word, a number or an id is the same
# tokens in the request, after `"q":"` and inside a title (BPE merges only inside a pre-token).
# Spaces ride with the punctuation (", " is one piece): 5 % fewer tokens than a token per space.
IDENTITY_SPLIT = r"[A-Za-z]+|\d{1,3}|[^A-Za-z\d]+"
# The same without a lone digit in any number of two or more: groups of three while three more follow,
# then a pair (a 10-digit id is 3+3+2+2, not 3+3+3+1; 4 digits 2+2, 5 digits 2+3). A lone last digit is
# the id piece that is copied last (results/distill/README.md: 0.38 where the others are 0.75-0.80).
IDENTITY_SPLIT_NO_LONE_DIGIT = r"[A-Za-z]+|\d{3}(?=\d{3})|\d{3}(?!\d)|\d{1,2}|[^A-Za-z\d]+"

# The JSON that stands right before a product id, one token each (matched after the spacing is
# folded): the first result of a page, every later one, and a call's product_ids. A copied id's
# first digit group then follows a token that says which result it is.
ID_KEY_PIECES = ('[{"product_id":"', '},{"product_id":"', '{"product_ids":"')


def _pre_tokenizer(identity: bool, no_lone_digit: bool = False):
    from tokenizers import Regex, pre_tokenizers

    if identity:
        split = IDENTITY_SPLIT_NO_LONE_DIGIT if no_lone_digit else IDENTITY_SPLIT
        splits = [pre_tokenizers.Split(Regex(split), behavior="isolated")]
    else:
        splits = [pre_tokenizers.Split(Regex(r" [A-Za-z]+"), behavior="isolated"),
                  pre_tokenizers.Split(Regex(r"\d{1,3}"), behavior="isolated")]
    return pre_tokenizers.Sequence([*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def build_arena_tokenizer(texts: list[str], vocab_size: int = 4096, max_token_length: int = 24,
                          whole_pieces: list[str] | tuple[str, ...] = (), identity: bool = False,
                          key_pieces: list[str] | tuple[str, ...] = (), no_lone_digit: bool = False):
    """A BPE tokenizer trained on rendered arena conversations (train-side text only).

    `whole_pieces` become one token each wherever they occur verbatim (matched before BPE): fixed
    prompt text (the system prompt, each tool schema) that every row repeats, or catalogue ids, so
    rows get shorter and copying an id is copying one token.

    A word after a space is always its own piece (" philips" is one token wherever the request
    puts it, so copying it into a search is learnable); JSON punctuation and keys merge freely
    (`","shop_id":"` is one token). Numbers split into groups of three digits, each group one
    token (all 1000 are in the vocabulary): a product id is four tokens that rarely recur within
    one page of results, so copying it from a tool result needs no long match.

    `identity`: spaces and punctuation split off every word (`IDENTITY_SPLIT`), so a word is
    the same token(s) wherever it stands, not " tefal" in the request and "tefal" after `"q":"`.
    `no_lone_digit` (with `identity`): numbers of two digits or more split with no lone digit
    (`IDENTITY_SPLIT_NO_LONE_DIGIT`: an id 3+3+2+2).

    `key_pieces` (e.g. ID_KEY_PIECES) are one token each too, matched after the JSON spacing is
    folded, so the same piece whether the tool result was written compact or with spaces."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    if no_lone_digit and not identity:
        raise ValueError("no_lone_digit is a rule of the identity split: it needs identity=True")
    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.Sequence([normalizers.Replace(a, b) for a, b in JSON_SPACING])
    bpe.pre_tokenizer = _pre_tokenizer(identity, no_lone_digit)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=WHOLE_TOKENS, max_token_length=max_token_length,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    numbers = " ".join(f"{n:03d} {n} {n:02d}" for n in range(1000))  # every digit group frequent enough to merge
    bpe.train_from_iterator([*texts, *_corpus(), *[numbers] * 40], trainer=trainer)
    tokenizer = _as_qwen3(bpe)
    if whole_pieces:
        tokenizer.add_tokens([AddedToken(p, normalized=False, special=False) for p in dict.fromkeys(whole_pieces) if p])
    if key_pieces:
        tokenizer.add_tokens([AddedToken(p, normalized=True, special=False) for p in dict.fromkeys(key_pieces) if p])
    tokenizer.chat_template = chat_template_text()
    return tokenizer


def fixed_prompt_pieces() -> list[str]:
    """The rendered text every evaluation prompt repeats, cut where tool subsets differ: the system
    block's head (system prompt, tools header), one line per tool schema, and its tail."""
    from shopdistill_assets.agent.rollout import SYSTEM_PROMPT
    from shopdistill_assets.sandbox.tool_specs import tool_schemas

    renderer = build_tokenizer(vocab_size=300)  # only its chat template is used
    text = renderer.apply_chat_template([{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "?"}],
                                        tools=tool_schemas(), tokenize=False)
    system = text.split("<|im_start|>system\n", 1)[1].split("<|im_end|>", 1)[0]
    start, end = system.index("<tools>\n{") + len("<tools>"), system.rindex("</tools>")  # the list, not its mention
    return [system[:start], *[line for line in system[start:end].split("\n") if line], system[end:]]


def render_conversations(rows: list[dict], limit: int | None = None) -> list[str]:
    """Conversations (`messages` as structs or JSON text, `tools` as JSON text) rendered with the
    chat template; plus one with every sandbox tool, the prompt the evaluation sends."""
    from shopdistill_assets.agent.rollout import SYSTEM_PROMPT
    from shopdistill_assets.sandbox.tool_specs import tool_schemas

    renderer = build_tokenizer(vocab_size=300)  # only its chat template is used
    texts = [renderer.apply_chat_template([{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "?"}],
                                          tools=tool_schemas(), tokenize=False)]
    for row in rows[:limit]:
        messages = json.loads(row["messages"]) if isinstance(row["messages"], str) else row["messages"]
        tools = json.loads(row["tools"]) if isinstance(row.get("tools"), str) else row.get("tools")
        texts.append(renderer.apply_chat_template(messages, tools=tools or None, tokenize=False))
    return texts


SMALL_SIZES = {  # hidden, layers, heads, kv heads, mlp
    "h128l4": (128, 4, 4, 2, 512),
    "small": (256, 4, 8, 4, 768),
    "medium": (384, 6, 6, 2, 1024),
}


def build_small_model(path: str | Path, texts: list[str], size: str = "small", vocab_size: int = 4096,
                      seed: int = 0, max_positions: int = 4096, whole_pieces: list[str] | tuple[str, ...] = (),
                      identity: bool = False, key_pieces: list[str] | tuple[str, ...] = (),
                      no_lone_digit: bool = False) -> Path:
    """A randomly initialised Qwen3 of `size` with a tokenizer trained on `texts` (plus
    `whole_pieces` and `key_pieces` as single tokens: build_arena_tokenizer); saved at `path`."""
    hidden, layers, heads, kv_heads, mlp = SMALL_SIZES[size]
    tokenizer = build_arena_tokenizer(texts, vocab_size, whole_pieces=whole_pieces, identity=identity,
                                      key_pieces=key_pieces, no_lone_digit=no_lone_digit)
    return _save_qwen3(Path(path), tokenizer, seed, hidden=hidden, layers=layers,
                       heads=heads, kv_heads=kv_heads, mlp=mlp, max_positions=max_positions)


_TURN = re.compile(r"<\|im_start\|>(system|user|assistant|tool)\n(.*?)<\|im_end\|>", re.S)
_CONTENT = re.compile(r"[A-Za-z0-9]")
_CALL = re.compile(r"<tool_call>.*?</tool_call>", re.S)


def loss_copy_share(tokenizer, texts: list[str]) -> dict[str, float | int]:
    """How far the loss is copying under `tokenizer`, over rendered conversations: of the loss
    tokens (assistant turns) that carry a letter or digit, the share whose token id occurs in an
    earlier user or tool turn of the same conversation (`copies`; `call_copies` within the tool
    calls alone, where the arguments are copied), and the mean tokens a conversation. A copy the tokenizer keeps identical is a lookup; one it renders as other tokens
    must be learned as a mapping."""
    content = copies = call_content = call_copies = tokens = 0
    for text in texts:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
        tokens += len(ids)
        spans = [(m.group(1), m.start(2), m.end(2)) for m in _TURN.finditer(text)]
        calls = [(m.start(), m.end()) for m in _CALL.finditer(text)]
        seen: set[int] = set()
        for token, (start, end) in zip(ids, offsets):
            role = next((r for r, a, b in spans if a <= start < b), None)
            if role in ("user", "tool"):
                seen.add(token)
            elif role == "assistant" and _CONTENT.search(text[start:end]):
                in_call = any(a <= start < b for a, b in calls)
                content, copies = content + 1, copies + (token in seen)
                call_content, call_copies = call_content + in_call, call_copies + (in_call and token in seen)
    return {"loss_content_tokens": content, "copies": copies / content if content else 0.0,
            "call_content_tokens": call_content, "call_copies": call_copies / call_content if call_content else 0.0,
            "tokens_per_conversation": tokens / len(texts) if texts else 0.0}
