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

from shopdistill_assets.agent.server import PolicyRequestError

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
        # the checkpoint's own sampling defaults (generation_config.json, as vLLM serves a model by
        # default): Qwen3 ships top_k 20 and top_p 0.95; a request's top_p / top_k override them
        config = getattr(self.model, "generation_config", None)
        self.sampling = {"top_k": getattr(config, "top_k", None), "top_p": getattr(config, "top_p", None)}
        self._lock = threading.Lock()

    def truncation(self, top_p: float | None, top_k: int | None) -> tuple[float | None, int | None]:
        """(top_p, top_k) for one request: the request's, else the checkpoint's; None where off."""
        p = top_p if top_p is not None else self.sampling["top_p"]
        k = top_k if top_k is not None else self.sampling["top_k"]
        return (p if p is not None and p < 1.0 else None), (k if k is not None and k > 0 else None)

    def prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        try:
            return self.tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True,
                                                      tokenize=False)
        except Exception as exc:  # template errors on odd client messages are the client's problem
            raise PolicyRequestError(f"chat template failed: {type(exc).__name__}: {exc}"[:300]) from None

    def __call__(self, messages, tools=None, *, temperature=None, max_tokens=None, seed=None, top_p=None,
                 top_k=None) -> dict[str, Any]:
        torch = self._torch
        text = self.prompt(messages, tools)
        ids = self.tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"].to(self.device)
        budget = min(max_tokens or self.max_new_tokens, self.max_new_tokens)
        if ids.shape[1] + budget > self.context:
            raise PolicyRequestError(f"prompt of {ids.shape[1]} tokens + {budget} exceeds the context of {self.context}")
        sample = bool(temperature) and temperature > 0
        gen: dict[str, Any] = {"max_new_tokens": budget, "do_sample": sample}
        if sample:
            p, k = self.truncation(top_p, top_k)
            gen.update(temperature=temperature, top_p=p or 1.0, top_k=k or 0)
        with self._lock, torch.no_grad():
            if sample and seed is not None:
                torch.manual_seed(seed)
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), **gen)
        new = out[0, ids.shape[1]:]
        message = parse_completion(self.tokenizer.decode(new, skip_special_tokens=False))
        message["usage"] = {"prompt_tokens": int(ids.shape[1]), "completion_tokens": int(new.shape[0])}
        return message


class BatchedHFPolicy(HFPolicy):
    """HFPolicy that decodes concurrent requests together (the server answers each connection on
    its own thread): a small model on CPU spends most of a decoding step in per-call overhead,
    so a batch of 8 costs little more than one sequence.

    A worker thread takes up to `max_batch` waiting requests, left-pads them and decodes with a
    KV cache; each row samples from its own generator seeded by its request's `seed`, so a reply
    does not depend on which requests shared its batch."""

    def __init__(self, path: str | Path, *, max_batch: int = 8, **kwargs: Any) -> None:
        import queue

        super().__init__(path, **kwargs)
        self.max_batch = max_batch
        self._queue: queue.Queue = queue.Queue()
        self._eos = {i for i in (self.tokenizer.convert_tokens_to_ids(t) for t in _END_TOKENS) if isinstance(i, int)}
        threading.Thread(target=self._work, name="batched-decoding", daemon=True).start()

    def __call__(self, messages, tools=None, *, temperature=None, max_tokens=None, seed=None, top_p=None,
                 top_k=None) -> dict[str, Any]:
        ids = self.tokenizer(self.prompt(messages, tools), add_special_tokens=False)["input_ids"]
        budget = min(max_tokens or self.max_new_tokens, self.max_new_tokens)
        if len(ids) + budget > self.context:
            raise PolicyRequestError(f"prompt of {len(ids)} tokens + {budget} exceeds the context of {self.context}")
        job = {"ids": ids, "budget": budget, "temperature": temperature or 0.0, "seed": seed or 0,
               "truncation": self.truncation(top_p, top_k), "done": threading.Event()}
        self._queue.put(job)
        job["done"].wait()
        if "error" in job:
            raise job["error"]
        message = parse_completion(self.tokenizer.decode(job["new"], skip_special_tokens=False))
        message["usage"] = {"prompt_tokens": len(ids), "completion_tokens": len(job["new"])}
        return message

    def _work(self) -> None:
        import queue

        while True:
            jobs = [self._queue.get()]
            while len(jobs) < self.max_batch:
                try:
                    jobs.append(self._queue.get(timeout=0.01))
                except queue.Empty:
                    break
            try:
                for job, new in zip(jobs, self._decode(jobs)):
                    job["new"] = new
            except Exception as exc:  # reported to every waiting request, never kills the worker
                for job in jobs:
                    job["error"] = PolicyRequestError(f"generation failed: {type(exc).__name__}: {exc}"[:300])
            for job in jobs:
                job["done"].set()

    def _decode(self, jobs: list[dict[str, Any]]) -> list[list[int]]:
        torch = self._torch
        width = max(len(j["ids"]) for j in jobs)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.tensor([[pad] * (width - len(j["ids"])) + j["ids"] for j in jobs], device=self.device)
        mask = torch.tensor([[0] * (width - len(j["ids"])) + [1] * len(j["ids"]) for j in jobs], device=self.device)
        generators = [torch.Generator().manual_seed(int(j["seed"]) & 0x7FFFFFFF) for j in jobs]
        new: list[list[int]] = [[] for _ in jobs]
        live = [True] * len(jobs)
        past, step_ids = None, ids
        with torch.no_grad():
            for _ in range(max(j["budget"] for j in jobs)):
                positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -step_ids.shape[1]:]
                out = self.model(input_ids=step_ids, attention_mask=mask, position_ids=positions,
                                 past_key_values=past, use_cache=True)
                past, logits = out.past_key_values, out.logits[:, -1, :].float()
                chosen = []  # finished rows keep decoding (cheaper than reshaping the cache); ignored
                for row, job in enumerate(jobs):
                    if job["temperature"] > 0:
                        probs = sampling_probs(logits[row] / job["temperature"], *job["truncation"]).cpu()
                        token = int(torch.multinomial(probs, 1, generator=generators[row]))
                    else:
                        token = int(logits[row].argmax())
                    if live[row]:
                        new[row].append(token)
                        live[row] = token not in self._eos and len(new[row]) < job["budget"]
                    chosen.append(token)
                if not any(live):
                    break
                step_ids = torch.tensor([[t] for t in chosen], device=self.device)
                mask = torch.cat([mask, torch.ones((len(jobs), 1), dtype=mask.dtype, device=self.device)], dim=1)
        return new


def sampling_probs(logits: Any, top_p: float | None = None, top_k: int | None = None) -> Any:
    """Next-token probabilities from one row of (temperature-scaled) logits, cut by transformers' own
    top-k then top-p warpers (the ones `generate` applies), so both decoders sample alike."""
    import torch
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    row = logits[None]
    if top_k is not None:
        row = TopKLogitsWarper(top_k)(None, row)
    if top_p is not None:
        row = TopPLogitsWarper(top_p)(None, row)
    return torch.softmax(row[0], -1)


def checkpoint_policy(path: str | Path, *, max_new_tokens: int = 512, batch_size: int = 1) -> HFPolicy:
    """The policy over a local checkpoint: one turn at a time, or `batch_size` decoded together."""
    if batch_size > 1:
        return BatchedHFPolicy(path, max_new_tokens=max_new_tokens, max_batch=batch_size)
    return HFPolicy(path, max_new_tokens=max_new_tokens)
