"""A run as a user chooses it: model, data, GRPO settings, Megatron parallelism, rollout engine size,
DeepEP mode and software profile; the stack's own run (``workloads.run``) and a team's run file alike."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, field_validator, model_validator

from software import DEFAULT_PROFILE, profile
from software import profiles as _profiles
from stackconfig.base import SCHEMA_VERSION, SchemaModel

class EntryPoint(StrEnum):
    """Miles' and Slime's entry points, in the framework's checkout (there is no ``train_rl.py``)."""

    SYNC = "train.py"
    ASYNC = "train_async.py"


class DeepEPVersion(StrEnum):
    V2 = "v2"
    """DeepEP 2.x ``ElasticBuffer`` on NCCL's GIN device API (SGLang ``deepep_v2``, >= 0.5.19)."""
    V1 = "v1"
    """Legacy DeepEP ``Buffer``: within one node (NVLink); its internode kernels need NVSHMEM IBGDA,
    which EFA does not provide, so engines using it span one node."""
    OFF = "off"
    """No DeepEP: NCCL all-to-all (SGLang ``--moe-a2a-backend none``, Megatron ``alltoall``)."""


class GinBackend(StrEnum):
    AUTO = "auto"
    """GPU-initiated on p5en, p6-b200 and p6-b300 (the GPU node setup brings what it needs on the
    host), the CPU proxy elsewhere (``workloads.derive.layout.resolve_deepep``)."""
    PROXY = "proxy"
    """NCCL GIN type 2: a host proxy thread drains GPU requests."""
    GPU = "gpu"
    """NCCL GIN type 5 (EFA GDA): needs EFA installer >= 1.50 and host EFA driver >= 3.3.0."""


class DeepEPSettings(SchemaModel):
    version: DeepEPVersion | None = None
    """Default, from ``workloads.derive.moe_backend``'s rules: off below SM90; v2 for blockwise-FP8 experts
    with SGLang >= 0.5.19; else v1 when an engine spans one node; else off."""
    gin_backend: GinBackend = GinBackend.AUTO
    sglang_mode: Literal["auto", "normal", "low_latency"] = "normal"
    """Legacy ``--sglang-deepep-mode``. ``normal`` by default: low_latency (and auto, which picks it
    for decode) turns on NVSHMEM IBGDA even within a node (sgl-deep-ep 0.1.2 buffers/legacy.py:105)."""


class ParallelSettings(SchemaModel):
    """Megatron parallelism of the actor (training) world; the world size comes from the train pool."""

    tensor: int = Field(4, ge=1)
    pipeline: int = Field(1, ge=1)
    context: int = Field(1, ge=1)
    expert: int = Field(8, ge=1)
    expert_tensor: int = Field(1, ge=1)
    sequence_parallel: bool = True


class RolloutSettings(SchemaModel):
    nodes_per_engine: int = Field(1, ge=1)
    """Nodes one SGLang engine spans; its TP = EP = nodes x GPUs per rollout node."""
    gpus_per_engine: int | None = Field(None, ge=1)
    """GPUs of one engine inside a node (a divisor of the node's GPUs), with ``nodesPerEngine`` 1.
    Default: ``nodesPerEngine`` whole nodes."""
    expert_parallel: bool = True
    """The engine shards its experts by expert parallelism (``--sglang-ep-size`` = its GPUs) and moves
    tokens with the run's all-to-all; false: by tensor parallelism alone (``--sglang-ep-size 1``), no
    all-to-all and so no DeepEP: the seed's simplest alternative."""
    dp_attention: bool = True
    """``--sglang-enable-dp-attention`` with DP = engine size (MoE with DeepEP)."""
    mem_fraction_static: float | None = Field(None, gt=0, lt=1)
    """SGLang's static memory fraction. Default: not passed, so SGLang sizes it itself (Miles leaves it
    unset too); 0.7 is the colocated value, wrong for the dedicated rollout GPUs here."""

    @model_validator(mode="after")
    def _one_engine_shape(self) -> "RolloutSettings":
        if self.gpus_per_engine is not None and self.nodes_per_engine > 1:
            raise ValueError(f"gpusPerEngine: {self.gpus_per_engine} sizes an engine inside one node and "
                             f"nodesPerEngine is {self.nodes_per_engine}; allowed: one of the two")
        return self


class GrpoSettings(SchemaModel):
    """GRPO settings (defaults: Miles v0.1.0's scripts/run_qwen3_30b_a3b.py recipe)."""

    num_rollout: int = Field(3000, ge=1)
    rollout_batch_size: int = Field(32, ge=1)
    n_samples_per_prompt: int = Field(8, ge=1)
    global_batch_size: int = Field(256, ge=1)
    rollout_max_response_len: int = Field(8192, ge=1)
    rollout_temperature: float = Field(1.0, ge=0)
    kl_loss_coef: float = Field(0.0, ge=0)
    kl_loss_type: Literal["k1", "k2", "k3", "low_var_kl"] = "low_var_kl"
    entropy_coef: float = Field(0.0, ge=0)
    eps_clip: float = Field(0.2, gt=0)
    eps_clip_high: float = Field(0.28, gt=0)
    lr: float = Field(1e-6, gt=0)
    max_tokens_per_gpu: int = Field(32768, ge=1)

    @model_validator(mode="after")
    def _batches(self) -> "GrpoSettings":
        samples = self.rollout_batch_size * self.n_samples_per_prompt
        if samples % self.global_batch_size:
            raise ValueError(f"globalBatchSize: {self.global_batch_size} must divide rolloutBatchSize x "
                             f"nSamplesPerPrompt = {samples} (Miles takes whole optimizer steps per rollout)")
        return self


RUN_NAME = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$"


class RunBase(SchemaModel):
    """One Miles GRPO run: model, data, algorithm, parallelism. Paths are derived (see ``paths``)."""

    name: str = Field("grpo", pattern=RUN_NAME)
    """Run name: the checkpoint directory, the RayJob and the TorchX app are named after it (a
    DNS-1035 label: KubeRay refuses a RayJob name that starts with a digit)."""
    entry_point: EntryPoint = EntryPoint.SYNC
    software: str = DEFAULT_PROFILE
    """Software profile (``software/profiles.yaml``; ``moe-rl profiles``): the image,
    the entry point's CLI dialect, the flag lists and the MoE rules of the run. Default: miles-0.1."""
    fabric: Literal["efa", "sockets"] = "efa"
    """How NCCL crosses nodes: ``efa`` through aws-ofi-nccl, or ``sockets`` (TCP over the pods'
    network, EFA devices still attached) to measure what EFA adds; ``sockets`` runs no DeepEP."""
    model: str = Field("Qwen/Qwen3-30B-A3B", pattern=r"^[\w.-]+/[\w.-]+$")
    """Hugging Face repo id; staged on the shared file system by the preprocessing Job."""
    ref_model: str | None = Field(None, pattern=r"^[\w.-]+/[\w.-]+$")
    """Hugging Face repo id of the BF16 checkpoint the trainer starts from (``--ref-load``), staged beside
    ``model``. Default: ``model`` when it is BF16; for a ``*-FP8`` model, the BF16 release of the same
    name (Qwen publishes both). Miles' low-precision recipe serves the FP8 checkpoint to SGLang and keeps
    a BF16 one for the trainer (radixark/miles@49cac7b5 docs/advanced/low-precision.md, "BF16 train +
    FP8 inference"); Megatron-Bridge would cast FP8 weights without their block scales."""
    expert_precision: Literal["bf16", "fp8-blockwise"] | None = None
    """Precision of the checkpoint's expert weights. Default: fp8-blockwise for a model named *-FP8
    (Qwen's and DeepSeek's 128x128 blockwise FP8 releases), else bf16."""
    model_params_b: float | None = Field(None, gt=0)
    """Total parameters in billions (all experts), for the checkpoint budget; known for the presets."""
    model_args: list[str] | None = None
    """Megatron architecture flags. Default: the preset for ``model`` (from Miles' scripts/models)."""
    dataset: str = Field("zhuzilin/dapo-math-17k", pattern=r"^[\w.-]+/[\w.-]+$")
    prompt_file: str = Field("dapo-math-17k.jsonl", pattern=r"^[\w.-]+$")
    input_key: str = "prompt"
    label_key: str = "label"
    apply_chat_template: bool = True
    rm_type: str = "deepscaler"
    """Rule-based reward Miles computes in-process when no reward service runs (and the rule the
    default reward service applies when it does)."""
    save_interval: int = Field(20, ge=1)
    grpo: GrpoSettings = GrpoSettings()
    parallel: ParallelSettings = ParallelSettings()
    rollout: RolloutSettings = RolloutSettings()
    deepep: DeepEPSettings = DeepEPSettings()
    extra_args: list[str] = []
    """Further Miles/Megatron/``--sglang-*`` flags, appended last; checked against the flag lists, and refused
    where they would replace what the platform sets (docs/reference/errors.md)."""
    attempt: int = Field(1, ge=1)
    """RayJob attempt: a finished RayJob is not run again; raising this names a new RayJob
    (``<name>-<attempt>``). Miles resumes from the last complete checkpoint in ``--load`` (the same
    directory for every attempt)."""

    @field_validator("software")
    @classmethod
    def _known_profile(cls, name: str) -> str:
        profile(name)  # ValueError listing the allowed names
        return name

    @model_validator(mode="after")
    def _a2a_of_the_profile(self) -> "RunBase":
        """``deepep.version`` among what the profile's versions can run (``Profile.a2a``)."""
        p, version = profile(self.software), self.deepep.version
        if version is not None and version.value not in p.a2a:
            ok = [n for n, q in _profiles().items() if version.value in q.a2a]
            raise ValueError(f"deepep.version: {version.value} is not available with software {p.name} "
                             f"({p.summary}); allowed: {', '.join(p.a2a)}, or software: {', '.join(ok) or 'none'}")
        if self.fabric == "sockets" and version not in (None, DeepEPVersion.OFF):
            raise ValueError(f"deepep.version: {version.value} needs RDMA between GPUs and fabric is sockets; "
                             f"allowed: off, or fabric: efa")
        if not self.rollout.expert_parallel and version not in (None, DeepEPVersion.OFF):
            raise ValueError(f"deepep.version: {version.value} is an expert all-to-all and the engines run without "
                             f"expert parallelism (rollout.expertParallel: false); allowed: off")
        return self

    @field_validator("ref_model")
    @classmethod
    def _bf16_reference(cls, name: str | None) -> str | None:
        if name and name.upper().endswith("-FP8"):
            raise ValueError(f"{name} is an FP8 checkpoint; the trainer starts from a BF16 one (Miles "
                             f"docs/advanced/low-precision.md: --hf-checkpoint FP8 for SGLang, --ref-load BF16 "
                             f"for the trainer); allowed: the BF16 release, e.g. {name[:-4]}")
        return name

    @field_validator("extra_args", "model_args")
    @classmethod
    def _flags_first(cls, args: list[str] | None) -> list[str] | None:
        if args and not args[0].startswith("--"):
            raise ValueError(f"must start with a --flag, got {args[0]!r}")
        return args


class RunSpec(RunBase):
    """The stack's own run (``workloads.run``)."""

    ray_job: bool = False
    """Opt-in: declare the run as a KubeRay RayJob on the stack's RayCluster (else submit with TorchX)."""
    suspend: bool = False
    """The stack's RayCluster without pods (``spec.suspend``: KubeRay deletes them), so the nodes of a
    reserved pool can be drained for an upgrade (docs/operations/failures.md, "Upgrade a reserved pool")."""


class TopologyMode(StrEnum):
    HARD = "hard"
    """Volcano places the group within one HyperNode of the chosen tier, or not at all."""
    SOFT = "soft"
    """Volcano prefers the narrowest HyperNode but places the group anyway."""
    NONE = "none"
    """No network constraint."""


class RunFile(RunBase):
    """A run as a team submits it (``runs/<name>.yaml``, or ``workloads.runs[]`` to keep it in the
    graph): the run's settings, plus its team, its priority and the whole nodes it takes per GPU pool.
    It brings up its own Ray cluster in the team's namespace and releases it when it ends."""

    schema_version: Literal[1] = SCHEMA_VERSION
    """The schema version the file is written for (CHANGELOG.md); a file without one is read as this release's."""
    name: str = Field(pattern=RUN_NAME)
    """Run name, required: the checkpoint directory and the RayJob are named after it, in its team's
    namespace (two teams' runs may share a name)."""
    team: str
    priority: str = "normal"
    """A name of ``workloads.priorityClasses``: which run waits, and which a higher one may preempt."""
    nodes: dict[str, int] = Field(min_length=1)
    """GPU pool name -> whole nodes the run takes: the stack's training and rollout pools, both >= 1."""
    topology: TopologyMode = TopologyMode.HARD
    """How the run's gang and its training group are held to the narrowest network tier that holds them."""

    @property
    def key(self) -> str:
        """``<team>/<name>``: what tells a run apart among every team's runs."""
        return f"{self.team}/{self.name}"
