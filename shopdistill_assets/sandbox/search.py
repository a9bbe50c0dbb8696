"""A BM25 search index over the catalog, standing in for ShoppingBench's Lucene index.

Vectorized with numpy: postings are CSR arrays; a query sums BM25 contributions per term, then
filters (shop, price range, services) are boolean masks. Results are cached per request because
agents (and the simulator) repeat the same searches many times.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from typing import Any

import numpy as np

from shopdistill_assets.sandbox.catalog import SERVICES, Catalog, document_contents

PAGE_SIZE = 10
MAX_PAGE = 5
TARGET_HITS = PAGE_SIZE * MAX_PAGE  # the server keeps the best 50 that pass the filters
SEARCH_FIELDS = ("product_id", "shop_id", "title", "price", "service", "sold_count")
_TOKEN = re.compile(r"[a-z0-9]+(?:\.[0-9]+)?")


def tokenize(text: str) -> list[str]:
    tokens = _TOKEN.findall(text.lower())
    # light plural folding: "bags" and "bag" meet; short words stay as they are
    return [t[:-1] if len(t) > 3 and t.endswith("s") and not t.endswith("ss") else t for t in tokens]


class SearchIndex:
    """BM25 (k1 1.2, b 0.75) over title, sku values and attribute values."""

    def __init__(self, catalog: Catalog, k1: float = 1.2, b: float = 0.75) -> None:
        self.catalog = catalog
        self.product_ids: list[str] = list(catalog.products)
        products = [catalog.products[pid] for pid in self.product_ids]
        self.price = np.array([p["price"] for p in products], dtype=np.float64)
        self.sold = np.array([p["sold_count"] for p in products], dtype=np.int64)
        shops = sorted({p["shop_id"] for p in products})
        self._shop_code = {s: i for i, s in enumerate(shops)}
        self.shop = np.array([self._shop_code[p["shop_id"]] for p in products], dtype=np.int32)
        self.service = np.array(
            [sum(1 << i for i, s in enumerate(SERVICES) if s in p["service"]) for p in products], dtype=np.int8
        )
        self._build_postings([tokenize(document_contents(p)) for p in products], k1, b)
        self._search = lru_cache(maxsize=65536)(self._search_uncached)

    def _build_postings(self, docs: list[list[str]], k1: float, b: float) -> None:
        vocab: dict[str, int] = {}
        rows: list[tuple[int, int, int]] = []
        for doc_idx, tokens in enumerate(docs):
            for token, tf in Counter(tokens).items():
                rows.append((vocab.setdefault(token, len(vocab)), doc_idx, tf))
        rows.sort()
        term = np.array([r[0] for r in rows], dtype=np.int64)
        self._doc = np.array([r[1] for r in rows], dtype=np.int32)
        tf = np.array([r[2] for r in rows], dtype=np.float64)
        self.vocab = vocab
        self._offsets = np.searchsorted(term, np.arange(len(vocab) + 1))
        n_docs = max(len(docs), 1)
        doc_len = np.array([len(d) for d in docs], dtype=np.float64) if docs else np.zeros(0)
        avg = doc_len.mean() if len(doc_len) else 1.0
        df = np.diff(self._offsets).astype(np.float64)
        idf = np.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
        norm = k1 * (1.0 - b + b * doc_len[self._doc] / max(avg, 1e-9)) if len(rows) else np.zeros(0)
        self._weight = idf[term] * tf * (k1 + 1.0) / (tf + norm)

    def scores(self, query: str) -> np.ndarray:
        scores = np.zeros(len(self.product_ids), dtype=np.float64)
        for token in set(tokenize(query)):
            tid = self.vocab.get(token)
            if tid is not None:
                lo, hi = self._offsets[tid], self._offsets[tid + 1]
                np.add.at(scores, self._doc[lo:hi], self._weight[lo:hi])
        return scores

    def search(
        self,
        q: str,
        page: int = 1,
        shop_id: str | None = None,
        price: tuple[float | None, float | None] | None = None,
        sort: str = "default",
        service: tuple[str, ...] = (),
    ) -> list[dict[str, Any]]:
        """One page (10) of product summaries, as `find_product` returns them."""
        ids = self._search(q, page, shop_id, price, sort, tuple(sorted(service)))
        return [self.summary(self.product_ids[i]) for i in ids]

    def _search_uncached(self, q, page, shop_id, price, sort, service) -> tuple[int, ...]:
        """As ORO's search server: the best 50 by relevance that pass the filters, then sorted
        (stably, so ties keep their relevance order), then paged."""
        scores = self.scores(q)
        mask = scores > 0
        if shop_id:
            code = self._shop_code.get(shop_id)
            mask &= self.shop == (code if code is not None else -1)
        if price:
            lo, hi = price
            if lo is not None:
                mask &= ~(self.price < lo)  # written as the server does: a NaN bound filters nothing
            if hi is not None:
                mask &= ~(self.price > hi)
        for s in service:
            if s in SERVICES:
                mask &= (self.service & (1 << SERVICES.index(s))) != 0
        candidates = np.flatnonzero(mask)
        best = candidates[np.lexsort((candidates, -scores[candidates]))][:TARGET_HITS]
        rank = np.arange(len(best))
        if sort == "priceasc":
            best = best[np.lexsort((rank, self.price[best]))]
        elif sort == "pricedesc":
            best = best[np.lexsort((rank, -self.price[best]))]
        elif sort == "order":
            best = best[np.lexsort((rank, -self.sold[best]))]
        start = (page - 1) * PAGE_SIZE
        return tuple(int(i) for i in best[start : start + PAGE_SIZE])

    def summary(self, product_id: str) -> dict[str, Any]:
        p = self.catalog.products[product_id]
        return {k: list(p[k]) if k == "service" else p[k] for k in SEARCH_FIELDS}
