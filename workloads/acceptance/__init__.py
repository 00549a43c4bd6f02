"""Fabric acceptance of a GPU pool: one Volcano Job per pool, with the run's image and environment,
that measures the pool's NVLink and EFA and says which node or link is slow.

The Job (``acceptance_job``) takes every node of the pool the way the pool's Ray worker does (same
image, resources with all EFA devices and huge pages, environment, /dev/shm, placement, security
context, the preflight init container) and runs on each node:

1. ``fabric_bench.py`` under ``torchrun`` over all nodes: NCCL all-reduce and all-to-all bus bandwidth
   within each node, over the whole pool, and all-reduce over every pair of nodes (round-robin);
2. where the pool runs DeepEP V2 (the rollout pool when ``workloads.run.deepep.version`` is v2: SGLang's
   ``deepep_v2``; Megatron then uses NCCL all-to-all), DeepEP's own ``tests/elastic/test_ep.py``
   within each node, and across the nodes of one engine when an engine spans several.

``compare`` checks the results against the family's figures (``family``: the instance catalog's, each
citing a public measurement or stating its derivation) and against the pool itself (a node or pair well below the
pool's median), and names the slow nodes and pairs; ``plot_svg`` draws it. Parsers read nccl-tests'
tables (``parse_nccl_tests``), DeepEP's test lines (``parse_deepep``) and fabric_bench's JSON.

Command line::

    python -m workloads.cli.acceptance <stack> <pool> | kubectl apply -f -      # or --apply
    kubectl logs -n <ns> -l volcano.sh/job-name=fabric-<pool> --tail=-1 --max-log-requests=64 \\
        | python -m workloads.cli.acceptance report --stack <stack> --pool <pool> --svg fabric.svg > fabric.json

The Job gang-schedules every node of the pool: while the stack's RayCluster holds those nodes it stays
Pending (run it before the run, or with the RayCluster's group scaled down).
"""

from __future__ import annotations

from workloads.acceptance.expected import (DEEPEP_README, DEEPEP_REFERENCE, EFFICIENCY, EXPECTED, Family, Figure, GIB, ML_ENG_NETWORK, NCCL_TESTS_PERF, expected, family, family_of)  # noqa: F401
from workloads.acceptance.parsers import (DEEPEP_TAG, from_nccl_tests, load_fabric_bench, parse_deepep, parse_nccl_tests)  # noqa: F401
from workloads.acceptance.compare import (compare)  # noqa: F401
from workloads.acceptance.plot import (plot_svg)  # noqa: F401
