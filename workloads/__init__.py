"""The workloads of the platform: Miles GRPO on KubeRay with SGLang rollout over EFA/DeepEP.

- ``settings``: the ``workloads:`` part of a stack (typed run spec and services);
- ``layout``: which pool every pod lands on and how big it is (from the pools and the catalog);
- ``argv``: the full Miles command line (shared by the RayJob and the TorchX component);
- ``env``: EFA / NCCL / DeepEP environment per instance family and DeepEP mode;
- ``manifests``: every Kubernetes object as a plain dict (pure functions), with the pods' security
  contexts, the namespace's NetworkPolicies, the Ray PodDisruptionBudgets and the Capacity Block
  end CronJob;
- ``schedulability``: ``check(cfg)`` proves every pod template fits its pool;
- ``validation``: checks that need both the pools and the workload settings;
- ``component``: the Pulumi component registering it all;
- ``torchx_miles``: the TorchX component that submits the same run.
"""

from workloads.settings import WorkloadSettings

__all__ = ["WorkloadSettings"]
