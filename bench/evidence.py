"""What an attempt shows it ran: its own argv (from its RayJob), SGLang's resolved server arguments and
NCCL's chosen network from the logs, and whether that contradicts the arm's configuration.

- argv (``bench.argv``): the rollout GPUs are its ``--rollout-num-gpus`` (``Collected.rollout_gpus``), never
  the nodes some pod touched. The mode of a step: the entry point
  (``train.py`` or ``train_async.py``), ``--partial-rollout`` and ``--over-sampling-batch-size`` (Miles
  ``miles/utils/arguments.py``; the flags of ``workloads/schemas/miles/49cac7b52507-flags.json``).
- SGLang: each engine logs ``server_args=<its resolved dict>`` at start (sglang 0.5.19
  ``sglang/srt/entrypoints/engine.py:265`` and ``:1098``, ``ServerArgs.resolved_dict``; older releases
  print ``server_args=ServerArgs(...)``); Ray forwards the engine actors' output to the driver log. Read:
  ``moe_a2a_backend``, ``moe_runner_backend``, ``deepep_mode``, ``deepep_v2_mode``.
- NCCL (with ``NCCL_DEBUG=INFO``): ``NCCL INFO Using network <name>`` (NCCL ``src/init.cc``,
  ``INFO(NCCL_INIT, "Using network %s", ...)``): ``Socket``, ``IB`` or aws-ofi-nccl's ``Libfabric``
  (``ncclNetPlugin_v*.name``, optionally prefixed by the plugin's name fix-up); GIN when aws-ofi-nccl
  logs ``gin: Initializing`` (``nccl_ofi_gin_init``).

Guarantees: a contradiction (SGLang resolved another a2a backend or runner than the argv asked for,
NCCL chose another network than the arm's fabric) is returned as a sentence naming the attempt; a
value the log does not show is reported as not shown, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workloads.pod.miles_launcher import ARGV_ENV

from .argv import flag, rayjob_argv
from .artifacts import ArtifactError, Collected

SGLANG_KEYS = ("moe_a2a_backend", "moe_runner_backend", "deepep_mode", "deepep_v2_mode")
_SERVER_ARGS = re.compile(r"server_args=")
_KEY = {k: re.compile(rf"['\"]?\b{k}['\"]?\s*[:=]\s*(?:['\"]([^'\"]*)['\"]|(None))") for k in SGLANG_KEYS}
_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_GIN = re.compile(r"\bgin: Initializing\b")
FABRIC_NETWORK = {"efa": "Libfabric", "sockets": "Socket"}
"""The substring of NCCL's network name each run-file ``fabric`` means."""


def argv(c: Collected) -> list[str]:
    """The attempt's ``[entry point, *flags]`` from its first RayJob."""
    got = rayjob_argv(c.rayjobs[0]) if c.rayjobs else None
    if got is None:
        raise ArtifactError(f"{c.attempt.folder}: its RayJob has no {ARGV_ENV} in spec.runtimeEnvYAML (not "
                            f"submitted by runs/bench?)")
    return got


def mode(c: Collected) -> str:
    """``sync``/``async`` from the entry point, with partial rollout and over-sampling when set."""
    words = argv(c)
    entry = words[0].rsplit("/", 1)[-1]
    parts = ["async" if entry.startswith("train_async") else "sync"]
    if flag(words, "--partial-rollout") is not None:
        parts.append("partial rollout")
    if (over := flag(words, "--over-sampling-batch-size")) is not None:
        parts.append(f"over-sampling {over}")
    return ", ".join(parts)


@dataclass(frozen=True)
class Evidence:
    sglang: dict[str, list[str]]
    """Each SGLang key -> the distinct resolved values the engines logged (empty: not logged)."""
    nccl_networks: list[str]
    gin: bool
    asked: dict[str, str | None]
    """What the argv asked SGLang for (``--sglang-<key>``) and the run file's fabric."""

    def to_json(self) -> dict:
        return {"sglang_resolved": self.sglang, "nccl_network": self.nccl_networks, "nccl_gin": self.gin,
                "asked": self.asked}


def read_evidence(c: Collected, text: str) -> Evidence:
    """Evidence from the attempt's driver log ``text`` (engine and NCCL lines forwarded by Ray)."""
    sglang: dict[str, list[str]] = {k: [] for k in SGLANG_KEYS}
    networks: list[str] = []
    gin = False
    for line in text.splitlines():
        if "server_args=" not in line and "NCCL INFO" not in line:
            continue
        if _SERVER_ARGS.search(line):
            for k, rx in _KEY.items():
                if (m := rx.search(line)) is not None:
                    value = m.group(1) if m.group(1) is not None else "None"
                    if value not in sglang[k]:
                        sglang[k].append(value)
        elif (m := _NETWORK.search(line)) is not None:
            if m.group(1) not in networks:
                networks.append(m.group(1))
        elif _GIN.search(line):
            gin = True
    words = argv(c)
    asked = {k: flag(words, "--sglang-" + k.replace("_", "-")) for k in SGLANG_KEYS}
    asked["fabric"] = c.attempt.run.fabric
    return Evidence(sglang, networks, gin, asked)


def contradictions(c: Collected, ev: Evidence) -> list[str]:
    """Where what the attempt shows it ran is not what its arm configured."""
    out = []
    for key in ("moe_a2a_backend", "moe_runner_backend", "deepep_mode", "deepep_v2_mode"):
        want, got = ev.asked.get(key), ev.sglang[key]
        if want and want != "auto" and got and got != [want]:
            out.append(f"SGLang resolved {key} {'/'.join(got)}, the argv asked for {want}")
    need = FABRIC_NETWORK.get(ev.asked["fabric"] or "")
    wrong = [n for n in ev.nccl_networks if need and need not in n]
    if wrong:
        out.append(f"NCCL chose network {'/'.join(wrong)} where fabric {ev.asked['fabric']} means {need}")
    return [f"{c.attempt.folder}: {o}" for o in out]
