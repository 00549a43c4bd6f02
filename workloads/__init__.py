"""The workloads of the platform: Miles GRPO on KubeRay with SGLang rollout over EFA/DeepEP.

One package per role, bottom to top (``tests/test_layers.py`` enforces the order: a package imports
only those before it, not even for type annotations):

- ``pod``: the programs that run inside the pods (preflight, launcher, reward server, staging,
  fabric bench); standard library only, shipped as a ConfigMap;
- ``schema``: the ``workloads:`` part of a stack, teams and run files: types and defaults only;
- ``derive``: the ``WorkloadModel``, derived once from a stack (placement, DeepEP/MoE resolution,
  resources, environment, argv, paths, images, Capacity Block end) and the offline plan of runs;
- ``acceptance``: the fabric acceptance report (expected figures, parsers, comparison, plot);
- ``render``: every Kubernetes object as a plain dict, one kind or concern per file;
- ``checks``: every cross-field and cross-object check of a stack and of a run file, including
  that each rendered pod fits its pool; ``checks.gate`` is the one entry every command calls;
- ``deploy``: the Pulumi component that registers them, what submitting a run creates, and the
  TorchX component;
- ``cli``: the command-line front ends (``python -m workloads.cli.runs``, ``workloads.cli.acceptance``,
  ``workloads.cli.torchx``).
"""
