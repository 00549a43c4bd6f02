"""Checkpoint bytes against the file system: what a run writes, how many saves it keeps, and
whether the FSx for Lustre file system holds them with the model and the data.

- One save (Megatron torch_dist, distributed optimizer) holds per parameter the bf16 weights
  (2 bytes) and the optimizer state: fp32 main parameters and Adam's two moments (3 x 4 bytes),
  14 bytes in all; Qwen3-30B-A3B's 30.5 B parameters (``software/models.yaml``) make about 427 GB.
- Retention: Megatron's ``--save-retain-interval R`` (Megatron-LM@37f91617
  megatron/training/checkpointing.py:733-734, 766-775) deletes the previous checkpoint after each
  save unless its iteration is a multiple of R; R must be a multiple of ``--save-interval``
  (arguments.py:904-906). Miles saves at the 0-based rollout id when (id + 1) % save_interval == 0
  (miles/utils/misc.py:150-151), so with R beyond the last rollout no saved iteration above 0 is a
  multiple of R: the latest complete save is kept, its predecessor until the new one is written.
  Nothing else in Miles or Megatron deletes saves; the S3 export keeps every one (it does not
  export deletions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from software import models

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig

GB = 1000 ** 3
GIB = 1024 ** 3
SAVE_BYTES_PER_PARAM = 2 + 3 * 4
"""bf16 weights + fp32 main parameters + Adam exp_avg + exp_avg_sq (distributed optimizer)."""
HF_BYTES_PER_PARAM = {"bf16": 2, "fp8-blockwise": 1}
USABLE_FRACTION = 0.9
"""Headroom on the file system: Lustre metadata and the save in flight beside the tracker."""


@dataclass(frozen=True)
class CheckpointBudget:
    params: float
    save_bytes: int
    saves_kept: int
    """Saves on the file system at the peak: the latest, the one being written, and iteration 0's
    when every rollout saves (iteration 0 is never deleted)."""
    hf_bytes: int
    data_bytes: int
    capacity_bytes: int

    @property
    def need_bytes(self) -> int:
        return self.saves_kept * self.save_bytes + self.hf_bytes + self.data_bytes

    @property
    def usable_bytes(self) -> int:
        return int(self.capacity_bytes * USABLE_FRACTION)

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.usable_bytes

    def min_capacity_gib(self) -> int:
        """The smallest PERSISTENT_2 size (1200 GiB or a multiple of 2400 GiB) that holds it."""
        gib = math.ceil(self.need_bytes / USABLE_FRACTION / GIB)
        return 1200 if gib <= 1200 else math.ceil(gib / 2400) * 2400


def model_params(cfg: "ProgramConfig") -> float | None:
    """The run's ``modelParamsB``, else its model's total parameters (``software/models.yaml``); None: unknown."""
    run = cfg.workloads.run
    if run.model_params_b:
        return run.model_params_b * 1e9
    entry = models.catalog().model(run.model)
    return entry.params_b * 1e9 if entry else None


def retain_interval(cfg: "ProgramConfig") -> int:
    """``--save-retain-interval``: the smallest multiple of the save interval beyond every rollout id."""
    interval = cfg.workloads.run.save_interval
    return interval * (cfg.workloads.run.grpo.num_rollout // interval + 1)


def budget(cfg: "ProgramConfig", precision: str) -> CheckpointBudget | None:
    """The run's checkpoint budget; None when the parameter count is unknown."""
    params = model_params(cfg)
    if params is None:
        return None
    run, storage = cfg.workloads.run, cfg.workloads.storage
    hf = params * HF_BYTES_PER_PARAM[precision]
    if precision != "bf16":  # the trainer's BF16 checkpoint is staged beside it (layout.ref_model)
        hf += params * HF_BYTES_PER_PARAM["bf16"]
    return CheckpointBudget(
        params=params, save_bytes=int(params * SAVE_BYTES_PER_PARAM),
        saves_kept=2 + (run.save_interval == 1), hf_bytes=int(hf),
        data_bytes=storage.dataset_gib * GIB, capacity_bytes=storage.capacity_gib * GIB)
