"""The stack schema of the full program: the platform's ``StackConfig`` plus ``workloads:``.

Defined here, in the workloads layer, so the workloads never import the program that composes them.
"""

from __future__ import annotations

from pydantic import model_validator

from stackconfig.stack import StackConfig

from .settings import WorkloadSettings
from .runs.config import check_declared_runs
from .validation import validate


class ProgramConfig(StackConfig):
    """The stack schema of this program: the platform's, plus ``workloads:``."""

    workloads: WorkloadSettings = WorkloadSettings()

    @model_validator(mode="after")
    def _workloads_fit_the_pools(self) -> "ProgramConfig":
        validate(self)
        check_declared_runs(self)
        return self
