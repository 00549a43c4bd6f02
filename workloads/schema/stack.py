"""The stack schema of the full program: the platform's ``StackConfig`` plus ``workloads:``.

Defined here, in the workloads layer, so the workloads never import the program that composes them.
Types and defaults only: the cross-field and cross-object checks are ``workloads.checks.gate``'s,
which every command loads a stack through.
"""

from __future__ import annotations

from stackconfig.stack import StackConfig

from workloads.schema.settings import WorkloadSettings


class ProgramConfig(StackConfig):
    """The stack schema of this program: the platform's, plus ``workloads:``."""

    workloads: WorkloadSettings = WorkloadSettings()
