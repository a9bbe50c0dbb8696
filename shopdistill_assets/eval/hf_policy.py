"""A policy over a local transformers causal LM checkpoint (Qwen3 chat format).

The prompt is the tokenizer's own chat template rendered with `tools=`; the completion is
parsed the way a tool-call parser in an inference server would: `<think>…</think>`, then
`<tool_call>{"name": …, "arguments": {…}}</tool_call>` blocks (Qwen3), also the ShoppingBench
list form `<tool_call>[{"name": …, "parameters": {…}}]</tool_call>`. Output that cannot be
parsed comes back as plain content (with the raw text), so the rollout fails the episode with
a reason rather than guessing.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from pathlib import Path
from typing import Any

from shopdistill_assets.eval.server import PolicyRequestError

_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_END_TOKENS = ("<|im_end|>", "<|endoftext|>")


def _call(name: Any, arguments: Any) -> dict[str, Any] | None:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if arguments is None:
        arguments = {}
    if not isinstance(name, str) or not name or not isinstance(arguments, dict):
        return None
    text = json.dumps(arguments, ensure_ascii=False)
    call_id = "call_" + hashlib.sha1(f"{name}\x1f{text}".encode()).hexdigest()[:12]
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def _block_calls(block: str) -> list[dict[str, Any]] | None:
    try:
        parsed = json.loads(block.strip())
    except ValueError:
        return None
    items = parsed if isinstance(parsed, list) else [parsed]
    calls = []
    for item in items:
        if not isinstance(item, dict):
            return None
        call = _call(item.get("name"), item.get("arguments", item.get("parameters")))
        if call is None:
            return None
        calls.append(call)
    return calls or None


def parse_completion(text: str) -> dict[str, Any]:
    """Model text → OpenAI assistant message (content, reasoning_content, tool_calls)."""
    for token in _END_TOKENS:
        text = text.split(token)[0]
    reasoning, rest = "", text
    if "</think>" in text:
        head, rest = text.split("</think>", 1)
        reasoning = head.split("<think>")[-1].strip()
    message: dict[str, Any] = {"role": "assistant", "content": rest.strip()}
    if reasoning:
        message["reasoning_content"] = reasoning
    if "<tool_call>" not in rest:
        return message
    blocks = _BLOCK.findall(rest)
    calls: list[dict[str, Any]] = []
    for block in blocks:
        parsed = _block_calls(block)
        if parsed is None:
            return message  # unparseable: raw text as content, no tool calls
        calls += parsed
    if not calls or rest.count("<tool_call>") != len(blocks):
        return message
    message["content"] = _BLOCK.sub("", rest).strip()
    message["tool_calls"] = calls
    return message


class HFPolicy:
    """Greedy (temperature 0/None) or sampled generation from a local checkpoint.

    Generation is serialized by a lock: one CPU model, many server threads.
    """

    def __init__(self, path: str | Path, *, device: str = "cpu", max_new_tokens: int = 512,
                 dtype: str | None = None, name: str | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a server's log is no place for loading bars

        self.path = Path(path)
        self.name = name or self.path.name
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        kwargs = {"dtype": getattr(torch, dtype)} if dtype else {}
        self.model = AutoModelForCausalLM.from_pretrained(self.path, local_files_only=True, **kwargs).to(device).eval()
        self.device = device
        self.max_new_tokens = max_new_tokens
        self.context = int(getattr(self.model.config, "max_position_embeddings", 32768))
        self._lock = threading.Lock()

    def prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        try:
            return self.tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True,
                                                      tokenize=False)
        except Exception as exc:  # template errors on odd client messages are the client's problem
            raise PolicyRequestError(f"chat template failed: {type(exc).__name__}: {exc}"[:300]) from None

    def __call__(self, messages, tools=None, *, temperature=None, max_tokens=None, seed=None) -> dict[str, Any]:
        torch = self._torch
        text = self.prompt(messages, tools)
        ids = self.tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"].to(self.device)
        budget = min(max_tokens or self.max_new_tokens, self.max_new_tokens)
        if ids.shape[1] + budget > self.context:
            raise PolicyRequestError(f"prompt of {ids.shape[1]} tokens + {budget} exceeds the context of {self.context}")
        sample = bool(temperature) and temperature > 0
        gen: dict[str, Any] = {"max_new_tokens": budget, "do_sample": sample}
        if sample:
            gen["temperature"] = temperature
        with self._lock, torch.no_grad():
            if sample and seed is not None:
                torch.manual_seed(seed)
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), **gen)
        new = out[0, ids.shape[1]:]
        message = parse_completion(self.tokenizer.decode(new, skip_special_tokens=False))
        message["usage"] = {"prompt_tokens": int(ids.shape[1]), "completion_tokens": int(new.shape[0])}
        return message
