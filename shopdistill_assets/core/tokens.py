"""Token counting for the format gate's length limit.

Without a tokenizer we use a fast estimate that over-counts on purpose: the limit (14,336
tokens by default) is a hard reject, and an estimate that errs long only drops a few
borderline traces, while one that errs short lets through samples the trainer will truncate.

The estimate: every ASCII digit is one token (Qwen-family tokenizers split numbers into
single digits, and tool results are full of product ids and prices), and the remaining UTF-8
bytes count one token per 3 bytes (English BPE averages about 4 bytes a token; JSON
punctuation and non-Latin text come closer to 3). It costs two C-level passes over the text.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

_DIGIT_BYTES = b"0123456789"
BYTES_PER_TOKEN = 3.0


def estimate_tokens(text: str) -> int:
    """Conservative token estimate: digits count one each, other UTF-8 bytes one per 3."""
    if not text:
        return 0
    data = text.encode("utf-8", "surrogatepass")
    # ASCII digits are single bytes in UTF-8 and no multi-byte sequence holds one, so counting
    # them in the bytes counts the text's digits (bytes.translate is several times str's)
    digits = len(data) - len(data.translate(None, _DIGIT_BYTES))
    other_bytes = len(data) - digits
    return digits + -(-other_bytes // int(BYTES_PER_TOKEN))


def count_tokens(text: str, tokenizer: Any | None = None) -> int:
    """Tokens in `text`: exact with a tokenizer (anything with `.encode`), else the estimate."""
    if tokenizer is None:
        return estimate_tokens(text)
    try:
        return len(tokenizer.encode(text, add_special_tokens=False))
    except TypeError:  # tokenizers without the HF keyword
        return len(tokenizer.encode(text))


@lru_cache(maxsize=4)
def load_tokenizer(path: str) -> Any:
    """A local Hugging Face tokenizer (no hub access); imported lazily, cached per path."""
    from transformers import AutoTokenizer  # heavy import, only when a path is configured

    return AutoTokenizer.from_pretrained(path, local_files_only=True)
