"""The stack schema of the full program: the platform's ``StackConfig`` plus ``workloads:``.

Defined here, in the workloads layer, so the workloads never import the program that composes them.
The schema checks each field and the workloads against the pools (``validation.validate``); it
reaches neither the workload model, the renderers nor the run files. Runs declared in the stack
(``workloads.runs``) are checked as run files by ``program.build``, before any resource exists.
"""

from __future__ import annotations

from pydantic import model_validator

from stackconfig.stack import StackConfig

from workloads.settings import WorkloadSettings
from workloads.validation import validate


class ProgramConfig(StackConfig):
    """The stack schema of this program: the platform's, plus ``workloads:``."""

    workloads: WorkloadSettings = WorkloadSettings()

    @model_validator(mode="after")
    def _workloads_fit_the_pools(self) -> "ProgramConfig":
        validate(self)
        return self
