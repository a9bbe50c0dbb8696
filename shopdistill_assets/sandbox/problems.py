"""Problem suites: ORO's suite JSON arrays and ShoppingBench's `synthesize_*_test.jsonl`.

A problem is `{query, category, difficulty, title, reward, voucher?}`; `reward` is one item
(Product) or an ordered list of items (Shop, Voucher). ShoppingBench's web (knowledge) problems
carry no category but a `Knowledge_Attribute` and the whole reward product: they are category
"Web". Suites carry no problem ids, so a problem's id is derived from its query text (uuid5),
stable across runs and machines.

JSON-lines suites split on "\n" only, as ShoppingBench reads them: `str.splitlines` would also
break inside a string at U+0085 or U+2028, which real problem texts contain.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CATEGORIES = ("Product", "Shop", "Voucher")
WEB = "Web"  # ShoppingBench's knowledge problems; scored by its web rule
_PROBLEM_NS = uuid.UUID("5b0e7c1e-3f0a-4f5e-9d2c-1b7a8e6f4c30")


def problem_id_for(query: str) -> str:
    """The deterministic id of a suite problem that carries none."""
    return str(uuid.uuid5(_PROBLEM_NS, " ".join(query.split())))


@dataclass(frozen=True)
class Problem:
    query: str
    category: str
    reward: tuple[dict[str, Any], ...]
    voucher: dict[str, Any] | None = None
    difficulty: str = ""
    title: str = ""
    problem_id: str = ""
    key_attribute: str = ""  # web problems: the fact the product must carry
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], category: str | None = None) -> Problem:
        query = raw.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ValueError("problem without a query")
        reward = raw.get("reward")
        items = reward if isinstance(reward, list) else [reward]
        items = tuple(item for item in items if isinstance(item, dict))
        if not items:
            raise ValueError(f"problem without reward items: {query[:80]!r}")
        voucher = raw.get("voucher") if isinstance(raw.get("voucher"), dict) else None
        key_attribute = raw.get("Knowledge_Attribute", items[0].get("key_attribute"))
        if key_attribute is not None:
            # kept on the reward item too (as ShoppingBench's web scoring does), so a problem
            # stored as its reward (the held-out rows) keeps it
            items = ({**items[0], "key_attribute": str(key_attribute)}, *items[1:])
            category = category if raw.get("category") else WEB
        cat = raw.get("category") or category or _infer_category(reward, voucher)
        return cls(
            query=query,
            category=str(cat),
            reward=items,
            voucher=voucher,
            difficulty=str(raw.get("difficulty") or ""),
            title=str(raw.get("title") or ""),
            problem_id=str(raw.get("problem_id") or problem_id_for(query)),
            key_attribute="" if key_attribute is None else str(key_attribute),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "problem_id": self.problem_id,
            "query": self.query,
            "category": self.category,
            "difficulty": self.difficulty,
            "title": self.title,
            "reward": self.reward[0] if self.category in ("Product", WEB) else list(self.reward),
        }
        if self.category == WEB:
            out["Knowledge_Attribute"] = self.key_attribute
        if self.voucher is not None:
            out["voucher"] = self.voucher
        return out


def _infer_category(reward: Any, voucher: Any) -> str:
    if voucher:
        return "Voucher"
    return "Shop" if isinstance(reward, list) else "Product"


def _category_from_name(path: Path) -> str | None:
    name = path.name.lower()
    for cat in (*CATEGORIES, WEB):
        if cat.lower() in name:
            return cat
    return None


def load_suite(path: str | Path) -> list[Problem]:
    """Load a suite file: a JSON array (ORO) or JSON lines (ShoppingBench test sets)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    hint = _category_from_name(path)
    if text.lstrip().startswith("["):
        raws = json.loads(text)
    else:
        raws = [json.loads(line) for line in text.split("\n") if line.strip()]
    return [Problem.from_dict(raw, category=hint) for raw in raws if isinstance(raw, dict)]


def write_suite(problems: list[Problem], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([p.to_dict() for p in problems], indent=1, sort_keys=True) + "\n")
    return path
