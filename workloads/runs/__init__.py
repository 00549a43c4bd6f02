"""Runs as separate, typed objects against a long-lived stack: the run file and its checks
(``config``), the offline plan of a set of runs (``plan``), network tiers (``topology``), the
Kubernetes calls that submit, list, show, follow and cancel them (``client``), and the command
(``python -m workloads.runs``)."""

from workloads.runs.config import NeverFits, check_run, load_run, run_config, run_model
from workloads.runs.plan import Decision, plan_runs

__all__ = ["Decision", "NeverFits", "check_run", "load_run", "plan_runs", "run_config", "run_model"]
