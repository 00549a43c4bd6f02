"""Model architectures, parameter counts and the recipe's fixed flags, as data (``models.yaml``).

Guarantees: every entry is typed (unknown or missing keys refused, naming the file and the field); every
architecture and the recipe name the upstream file they were read from (repository, tag, commit, blob);
an architecture's flag list states the dimensions the platform reads from it (``--num-layers``,
``--hidden-size``, ``--moe-router-topk``) and leaves out what the platform sets itself; a model's
blockwise-FP8 release is the same architecture and parameter count under another name; a model released
in blockwise FP8 only (``fp8Native``: DeepSeek's) names the BF16 checkpoint its trainer starts from, if
one is published, with where that is said; a model whose upstream recipe passes other precision flags
than the shared recipe names them, with the recipe file.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml
from pydantic import Field, ValidationError, model_validator

from . import COMMIT, _Model

DATA = Path(__file__).resolve().parent / "models.yaml"
READ = ("--num-layers", "--hidden-size", "--moe-router-topk", "--moe-ffn-hidden-size")
"""Flags the platform reads from an architecture (the MoE layer pattern, DeepEP V2's buffer size, the expert
columns an engine without expert parallelism shards)."""
SET_HERE = ("--moe-token-dispatcher-type", "--moe-layer-freq")
"""Flags the platform sets itself: the dispatcher per DeepEP mode, the layer pattern from ``--num-layers``."""


class Origin(_Model):
    """The upstream file a record was read from."""
    repository: str
    tag: str
    commit: str = Field(pattern=COMMIT)
    path: str
    blob: str = Field(pattern=COMMIT)


class Architecture(_Model):
    """Megatron's architecture flags of a model, as its upstream model script writes them."""
    origin: Origin
    megatron_args: tuple[str, ...]
    first_k_dense_replace: int = Field(ge=0)
    """Dense layers before the MoE ones (Miles' ``FIRST_K_DENSE_REPLACE``)."""

    @model_validator(mode="after")
    def _flags(self) -> "Architecture":
        for flag in READ:
            self.dimension(flag)
        set_here = [f for f in SET_HERE if f in self.megatron_args]
        if set_here:
            raise ValueError(f"megatronArgs: {', '.join(set_here)} is set by the platform, not the architecture")
        return self

    def dimension(self, flag: str) -> int:
        """The integer value of ``flag``; ValueError when the flags lack it."""
        args = self.megatron_args
        if flag not in args or args.index(flag) + 1 == len(args) or not args[args.index(flag) + 1].isdigit():
            raise ValueError(f"megatronArgs: {flag} with an integer value is required")
        return int(args[args.index(flag) + 1])

    @property
    def args(self) -> list[str]:
        """The flags a run passes: the upstream list and its MoE layer pattern (Miles' ``moe_layer_freq``)."""
        layers = self.dimension("--num-layers")
        dense = min(self.first_k_dense_replace, layers)
        return [*self.megatron_args, "--moe-layer-freq", "[" + ",".join(["0"] * dense + ["1"] * (layers - dense)) + "]"]


class Precision(_Model):
    """The precision flags of a model's own upstream recipe, where they differ from the shared recipe's."""
    origin: Origin
    precision: tuple[str, ...]


class Model(_Model):
    params_b: float = Field(gt=0)
    """Total parameters (all experts), in billions: the checkpoint budget's."""
    params_origin: str
    fp8_release: str | None
    """The Hugging Face repository of its blockwise-FP8 release (same architecture), if any."""
    fp8_origin: str | None
    fp8_native: bool = False
    """The repository named is itself blockwise FP8 (DeepSeek's releases): SGLang serves it as it is."""
    bf16_release: str | None = None
    """For an ``fp8Native`` model: a published BF16 checkpoint of it, the trainer's (``--ref-load``)."""
    bf16_origin: str | None = None
    recipe: Precision | None = None
    """Its own recipe's precision flags, in place of the shared recipe's ``precision``."""
    architecture: Architecture

    @model_validator(mode="after")
    def _fp8(self) -> "Model":
        if (self.fp8_release is None) != (self.fp8_origin is None):
            raise ValueError("fp8Origin: required exactly with fp8Release")
        if (self.bf16_release is None) != (self.bf16_origin is None):
            raise ValueError("bf16Origin: required exactly with bf16Release")
        if self.fp8_native and self.fp8_release:
            raise ValueError("fp8Release: an fp8Native model is its own FP8 release")
        if self.bf16_release and not self.fp8_native:
            raise ValueError("bf16Release: only an fp8Native model names its BF16 checkpoint (the others are BF16)")
        return self


class Recipe(_Model):
    """The recipe's flags every run passes unchanged, by the group of the recipe they come from."""
    origin: Origin
    rollout: tuple[str, ...]
    grpo: tuple[str, ...]
    optimizer: tuple[str, ...]
    recompute: tuple[str, ...]
    precision: tuple[str, ...]


class Catalog(_Model):
    models: dict[str, Model]
    recipe: Recipe

    def names(self) -> list[str]:
        """Every repository a run may name without ``modelArgs``: each model and its FP8 release."""
        return [n for name, m in self.models.items() for n in (name, m.fp8_release) if n]

    def model(self, name: str) -> Model | None:
        """The entry of ``name`` (a model or its FP8 release); None when there is none."""
        return next((m for key, m in self.models.items() if name in (key, m.fp8_release)), None)

    def precision(self, name: str) -> tuple[str, ...]:
        """The precision flags a run of ``name`` passes: its model's own recipe's, else the shared recipe's."""
        entry = self.model(name)
        return entry.recipe.precision if entry and entry.recipe else self.recipe.precision


def load(data: Path = DATA) -> Catalog:
    """The typed file; ValueError naming the file and each bad field."""
    try:
        return Catalog.model_validate(yaml.safe_load(data.read_text()))
    except ValidationError as e:
        lines = [f"{'.'.join(map(str, err['loc'])) or '(file)'}: {err['msg'].removeprefix('Value error, ')}"
                 for err in e.errors()]
        raise ValueError(f"{data.name}: invalid\n  " + "\n  ".join(lines)) from None


@cache
def catalog() -> Catalog:
    return load()
