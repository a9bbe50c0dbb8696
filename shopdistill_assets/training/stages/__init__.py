"""The training stages: one registry, one script per method, runnable by hand under `deepspeed`.

    stage        script        TRL config   trains on              starts from
    sft          sft.py        SFTConfig    train_corpus           the base model
    resft        sft.py        SFTConfig    resft_dataset          sft
    teacher_sft  sft.py        SFTConfig    teacher_sft_dataset    resft
    kto          kto.py        KTOConfig    kto_dataset            teacher_sft
    dr_grpo      dr_grpo.py    GRPOConfig   grpo_dataset           kto

Each script parses three typed configs with TRL's `TrlParser`, from a YAML file (`--config`) and
the command line: its own script dataclass (paths, lineage, method settings such as
`only_successful`), the method's TRL config, and TRL's `ModelConfig` (so LoRA is `use_peft: true`).
The Dagster stage config passes those keys through (`training.StageTrainConfig`); nothing here
imports TRL, so loading the definitions stays cheap. A sixth stage is one `Stage` entry (plus a
`Method` entry and its script when it trains with a new method).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    name: str
    script: str           # file under shopdistill_assets/training/stages/
    config_class: str     # the TRL config class the script parses (trl.<name>)


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("sft", "sft.py", "SFTConfig"),
    Method("kto", "kto.py", "KTOConfig"),
    Method("dr_grpo", "dr_grpo.py", "GRPOConfig"),
)}


@dataclass(frozen=True)
class Stage:
    name: str
    method: str            # a METHODS key: the script and TRL config class
    dataset: str           # the lake snapshot asset it trains on
    parent: str | None     # the stage whose newest checkpoint it starts from; None: the base model
    rollouts: tuple[str, ...] = ()  # training-data assets its one-stage job rebuilds first

    @property
    def asset(self) -> str:
        return f"{self.name}_checkpoint"

    @property
    def script(self) -> str:
        return METHODS[self.method].script

    @property
    def config_class(self) -> str:
        return METHODS[self.method].config_class


STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("sft", "sft", "train_corpus", None),
    Stage("resft", "sft", "resft_dataset", "sft", ("train_problems", "train_rollouts", "resft_dataset")),
    Stage("teacher_sft", "sft", "teacher_sft_dataset", "resft",
          ("train_problems", "teacher_rollouts", "teacher_sft_dataset")),
    Stage("kto", "kto", "kto_dataset", "teacher_sft", ("kto_dataset",)),
    Stage("dr_grpo", "dr_grpo", "grpo_dataset", "kto", ("grpo_dataset",)),
)}
STAGE_ORDER = list(STAGES)
