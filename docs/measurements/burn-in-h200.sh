# The burn-in agent's decision (nodes/agent.py decide) on one H200 without Kubernetes, EFA or DCGM:
# the files laid out flat as the burn-in ConfigMap lays them out, the preflight and intra-node NCCL
# steps run for real (DCGM and EFA steps given no allowance, so skipped), then a plan whose budget is
# too short, which must end as a failure naming the step, never a pass.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
cp "$root"/nodes/{agent,dcgm,efa,pairs,marks,incluster,replace,watch}.py "$root"/workloads/pod/{preflight,fabric_bench}.py "$work"/
cd "$work"
nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())"
plan='{"pool": "h200", "gpus": 1, "efaDevices": 0, "preflight": ["--gpus", "1", "--shm-gib", "1"],
       "budgetSeconds": 600, "steps": {"preflight": 60, "dcgm": 0, "nccl": 300, "efa": 0},
       "dcgmLevel": 1, "dcgmSeconds": 0, "benchSizes": ["1M", "256M"], "replace": false,
       "floors": [{"op": "all_reduce", "busbw": 0.0, "advisory": false}]}'
for case in pass short; do
  results=$work/results-$case; mkdir -p "$results"
  [ "$case" = short ] && plan=$(echo "$plan" | sed 's/"budgetSeconds": 600/"budgetSeconds": 5/')
  echo "== $case"
  /usr/bin/time -f "wall %e s" python3 -c "
import json, sys; from pathlib import Path; import agent
print(json.dumps(agent.decide(json.loads(sys.argv[1]), Path(sys.argv[2])), indent=1))" "$plan" "$results" 2>&1 | tail -40
done
