"""Where a run reads and writes on the shared file system: model, reference model, data, checkpoints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from workloads.derive.deepep import ref_model
from workloads.pod.miles_launcher import SAVE_TRIGGER

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig

@dataclass(frozen=True)
class Paths:
    mount: str
    model: str
    """The checkpoint SGLang serves (``--hf-checkpoint``)."""
    ref_model: str
    """The BF16 checkpoint the trainer starts from (``--ref-load``; ``ref_model``)."""
    data: str
    checkpoints: str

    @property
    def save_trigger(self) -> str:
        """Miles' ``--save-trigger-sentinel``: when this file exists after a training step, Miles saves
        a checkpoint at once (synchronously) and removes it (train.py / train_async.py, v0.1.0)."""
        return f"{self.checkpoints}/{SAVE_TRIGGER}"


def paths(cfg: "ProgramConfig") -> Paths:
    """Where Miles reads and writes, all on the shared FSx for Lustre file system."""
    w = cfg.workloads
    mount = w.storage.mount_path.rstrip("/")
    return Paths(mount=mount,
                 model=f"{mount}/models/{w.run.model.split('/')[1]}",
                 ref_model=f"{mount}/models/{ref_model(cfg).split('/')[1]}",
                 data=f"{mount}/datasets/{w.run.dataset.split('/')[1]}/{w.run.prompt_file}",
                 checkpoints=f"{mount}/{CHECKPOINT_DIR}/{w.run.name}")


CHECKPOINT_DIR = "checkpoints"
"""Directory on the file system linked to the bucket's ``checkpoints/`` prefix (auto export/import)."""


RUNNING_MARKER = "RUNNING"
"""A submitted run's lease, fresh in its checkpoint directory while Miles runs (``miles_launcher.Lease``)."""
