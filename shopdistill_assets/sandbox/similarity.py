"""Title similarity for the scorer's title rule, pluggable.

The validator embeds both titles with Qwen3-Embedding-0.6B and passes the rule at cosine >= 0.7
(production-strict). That model cannot be downloaded here, so the default is an offline
*lexical* similarity: cosine over sets of title tokens. It is documented as an approximation:
it agrees with the embedding on near-identical titles (the usual case: the reward title is the
product's own title) and is stricter on paraphrased titles.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Protocol

from shopdistill_assets.sandbox.search import tokenize


class TitleSimilarity(Protocol):
    threshold: float

    def similarity(self, a: str, b: str) -> float: ...


@lru_cache(maxsize=200_000)
def _token_set(text: str) -> frozenset[str]:
    return frozenset(tokenize(text))


class LexicalTitleSimilarity:
    """Cosine over token sets: |A n B| / sqrt(|A| |B|). Offline, deterministic."""

    name = "lexical"

    def __init__(self, threshold: float = 0.7) -> None:
        self.threshold = threshold

    def similarity(self, a: str, b: str) -> float:
        ta, tb = _token_set(a), _token_set(b)
        if not ta or not tb:
            return 0.0
        return len(ta & tb) / math.sqrt(len(ta) * len(tb))


class EmbeddingTitleSimilarity:
    """Cosine of last-token-pooled, L2-normalized embeddings (Qwen3-Embedding style).

    `model_path` is a local folder or a Hugging Face id; nothing is downloaded unless the
    caller's environment allows it.
    """

    name = "embedding"

    def __init__(self, model_path: str, threshold: float = 0.7, device: str = "cpu") -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.threshold = threshold
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
        self.model = AutoModel.from_pretrained(model_path).to(device).eval()
        self.device = device
        self._embed = lru_cache(maxsize=100_000)(self._embed_uncached)

    def _embed_uncached(self, text: str):
        torch = self._torch
        batch = self.tokenizer([text], return_tensors="pt", truncation=True, max_length=512).to(self.device)
        with torch.no_grad():
            hidden = self.model(**batch).last_hidden_state[:, -1]
        return torch.nn.functional.normalize(hidden, dim=-1)[0]

    def similarity(self, a: str, b: str) -> float:
        return float((self._embed(a) * self._embed(b)).sum())


def build_title_similarity(model_path: str | None = None, threshold: float = 0.7) -> TitleSimilarity:
    if model_path:
        return EmbeddingTitleSimilarity(model_path, threshold=threshold)
    return LexicalTitleSimilarity(threshold=threshold)
