set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../../workloads"  # preflight.py is run from here
echo "== machine"; nvidia-smi -L; uname -r; python3 --version
echo "== torch and the NCCL it loads (profile miles-0.1 pins torch 2.11.0 -> NCCL 2.28.9)"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', '.'.join(map(str, torch.cuda.nccl.version())))"
python3 -m pip show nvidia-nccl-cu13 2>/dev/null | grep -E '^(Name|Version|Location)'
echo "== what the loader finds for libnccl.so.2 (the old check's source)"
ldconfig -p | grep -i nccl || echo "ldconfig: no libnccl"
python3 -c "
import ctypes
try:
    lib = ctypes.CDLL('libnccl.so.2'); v = ctypes.c_int(); lib.ncclGetVersion(ctypes.byref(v)); print('loader libnccl.so.2:', v.value)
except OSError as e: print('loader libnccl.so.2: not loadable:', e)"
echo "== memlock and CAP_IPC_LOCK"; ulimit -l; grep -E '^Cap(Eff|Bnd)' /proc/self/status
echo "== /dev/gdrdrv"; ls -l /dev/gdrdrv 2>&1; ls /proc/driver/nvidia/params >/dev/null 2>&1 && grep -c . /proc/driver/nvidia/params
echo "== preflight: the GPU pod check of a miles-0.1 pod without EFA"
python3 preflight.py --gpus 1 --nccl 2.28.9 --shm-gib 1; echo "rc=$?"
echo "== preflight: the NCCL floor of miles-deepep-v2 (2.31.2) on this torch"
python3 preflight.py --gpus 1 --nccl 2.31.2 --shm-gib 1; echo "rc=$?"
echo "== preflight: a DeepEP V2 pod (GIN proxy) on a node without gdrdrv"
python3 preflight.py --gpus 1 --nccl 2.28.9 --shm-gib 1 --gin proxy; echo "rc=$?"
echo "== preflight: sockets fabric (one-rank NCCL communicator reports Socket)"
NCCL_NET=Socket NCCL_NET_PLUGIN=none NCCL_SOCKET_IFNAME=^lo python3 -c "
import preflight as P; print('nccl-net sockets:', P.check_nccl_network(sockets=True) or 'ok')"
