"""The five training stages: one script per method, runnable by hand under `deepspeed`.

    stage        script        trains on              starts from
    sft          sft.py        train_corpus           the base model
    resft        sft.py        resft_dataset          sft
    teacher_sft  sft.py        teacher_sft_dataset    resft
    kto          kto.py        kto_dataset            teacher_sft
    dr_grpo      dr_grpo.py    grpo_dataset           kto
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    method: str            # the script: sft | kto | dr_grpo
    dataset: str           # the lake snapshot asset it trains on
    parent: str | None     # the stage whose newest checkpoint it starts from; None: the base model
    rollouts: tuple[str, ...] = ()  # training-data assets its one-stage job rebuilds first

    @property
    def asset(self) -> str:
        return f"{self.name}_checkpoint"


STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("sft", "sft", "train_corpus", None),
    Stage("resft", "sft", "resft_dataset", "sft", ("train_problems", "train_rollouts", "resft_dataset")),
    Stage("teacher_sft", "sft", "teacher_sft_dataset", "resft",
          ("train_problems", "teacher_rollouts", "teacher_sft_dataset")),
    Stage("kto", "kto", "kto_dataset", "teacher_sft", ("kto_dataset",)),
    Stage("dr_grpo", "dr_grpo", "grpo_dataset", "kto", ("grpo_dataset",)),
)}
STAGE_ORDER = list(STAGES)
