"""Preprocessing Job: stage the run's model and prompt data on the shared file system.

The trainer's BF16 checkpoint (``REF_MODEL``, ``--ref-load``) is staged beside an FP8 model; for a model
released in FP8 only (DeepSeek's) it is the published upcast software/models.yaml names (``bf16Release``).
No cast here: Miles' own recipe casts with tools/fp8_cast_bf16.py (scripts/run_deepseek.py at 78527b91), which
needs CUDA (a Triton kernel, tensors loaded on the GPU) while this runs on CPU nodes; and no torch_dist
conversion: in bridge mode Miles loads a Hugging Face checkpoint itself (miles 49cac7b5
miles/backends/megatron_utils/checkpoint.py:114-128, 179-187). Idempotent: ``snapshot_download`` skips files already complete, so re-running the Job after a
partial download (or for a new run on the same model) only fetches what is missing. A Hugging Face
token, if the model is gated, comes from the optional Secret ``hf-token`` (key ``token``), mounted
as a file (``HF_TOKEN_FILE``) rather than passed in the environment.
"""

import os
import sys

MODEL, MODEL_DIR = os.environ["MODEL"], os.environ["MODEL_DIR"]
# The BF16 checkpoint the trainer starts from (--ref-load); the model itself when that is BF16.
REF_MODEL, REF_MODEL_DIR = os.environ.get("REF_MODEL", MODEL), os.environ.get("REF_MODEL_DIR", MODEL_DIR)
DATASET, DATA_DIR = os.environ["DATASET"], os.environ["DATA_DIR"]
PROMPT_FILE = os.environ["PROMPT_FILE"]


def _token() -> str | None:
    path = os.environ.get("HF_TOKEN_FILE", "")
    if path and os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    return os.environ.get("HF_TOKEN") or None


TOKEN = _token()


def main() -> int:
    from huggingface_hub import snapshot_download  # the preprocessing image's
    snapshot_download(MODEL, local_dir=MODEL_DIR, token=TOKEN)
    if REF_MODEL_DIR != MODEL_DIR:
        snapshot_download(REF_MODEL, local_dir=REF_MODEL_DIR, token=TOKEN)
    snapshot_download(DATASET, repo_type="dataset", local_dir=DATA_DIR, token=TOKEN)
    prompts = os.path.join(DATA_DIR, PROMPT_FILE)
    if not os.path.isfile(prompts):
        print(f"prompt file {prompts} is not in dataset {DATASET}", file=sys.stderr)
        return 1
    print(f"staged {MODEL} -> {MODEL_DIR}, {REF_MODEL} -> {REF_MODEL_DIR}, {DATASET} -> {DATA_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
