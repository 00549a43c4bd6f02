"""Software profiles: named, pinned GPU software stacks a run chooses (``software:``).

A profile is data (``profiles.yaml``), read into the typed ``Profile`` below. Everything
version-dependent in the workloads derives from the profile a run names: the image recipe, its build
arguments and tag, the entry point directory and CLI dialect (Miles or Slime), the vendored flag
lists the argv is checked against, the SGLang release the MoE rules are read from, the NCCL the
preflight expects, and which all-to-all backends (``deepep.version``) the versions can run.

This package sits below ``stackconfig`` and ``workloads`` and imports neither.
"""

from __future__ import annotations

import re
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

DATA = Path(__file__).resolve().parent / "profiles.yaml"
BUILT = Path(__file__).resolve().parent / "built"
"""One record per built image: ``<profile>.versions``, the image's ``/etc/rl-platform-image-versions``
(what its last build step read from the image itself), written by ``python -m workloads.cli.runs profiles
<profile> --record-image FILE``. Where a record exists, the profile's NCCL is the record's."""
BUILD_CONTEXT = "workloads/image"
"""The image builds' context (repository path): every profile's recipe is a Dockerfile in it."""
DEFAULT_PROFILE = "miles-0.1"
"""What a run gets when it names none: the stack the platform ran before profiles existed."""
COMMIT = r"^[0-9a-f]{40}$"
VERSION = r"^\d+\.\d+(\.\d+)?$"


GIN_MIN_NCCL = (2, 31, 2)
"""The NCCL aws-ofi-nccl 1.21.1's GIN is tested with (aws/aws-ofi-nccl v1.21.1 RELEASENOTES.md:12);
DeepEP V2 itself needs >= 2.30.4 (DeepEP README)."""
GIN_MIN_EFA_INSTALLER = (1, 50)
"""EFA installer 1.50.0 ships aws-ofi-nccl 1.21.1, the first plugin with GIN (proxy and GPU-initiated)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)


class Framework(StrEnum):
    MILES = "miles"
    """radixark/miles: strict CLI (unknown flags are errors), ``--save-trigger-sentinel``."""
    SLIME = "slime"
    """THUDM/slime: Megatron flags parsed with ``ignore_unknown_args=True`` (slime/utils/arguments.py:1423-1437
    at bd217a63): an unknown flag is dropped silently, so the argv generator checks every flag itself."""


class Source(_Model):
    """One pinned source tree: its repository, the ref its pin comes from, the commit, and the
    vendored flag list (``workloads/schemas/<flags>``) read from it."""
    repo: str
    ref: str
    commit: str | None = Field(None, pattern=COMMIT)
    """None: not readable where the catalog is kept; the image recipe takes it as a required build
    argument (``Image.required_args``) and records what it resolved in the image."""
    flags: str


class SGLang(_Model):
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    """The SGLang release line: its wheel's ``ServerArgs`` and MoE checks are the rules applied."""
    source: str
    """Where the image's SGLang comes from: the fork's repository, or the base image's release."""
    branch: str | None = None
    """The fork's branch the recipe checks out (``SGLANG_BRANCH``); None: the base image's SGLang."""
    commit: str | None = Field(None, pattern=COMMIT)
    """The fork's commit (``SGLANG_COMMIT``); None with a branch: a required build argument."""
    flags: str


class Wheels(_Model):
    """Miles' prebuilt wheels (flash-attn 2/3, TransformerEngine, apex, Mooncake, sgl-router, ...): compiled
    extensions that load against one torch only. yueming-yuan/miles-wheels README: "Each release is the
    complete, rolling wheel set for one (CUDA, arch) pair", re-synced in place by build_wheels.py upload."""
    repo: str
    release: str | None
    """The release tag (the recipe's ``WHEELS_TAG_X86``); None: no published release matches this
    profile's torch, so the build takes only the wheels placed in the build context (``wheels/``)."""
    torch: str = Field(pattern=VERSION)
    """The torch the release's extensions are built for; the build's last step refuses another."""


class Image(_Model):
    recipe: str = Field(pattern=rf"^{BUILD_CONTEXT}/[\w.-]+$")
    """A Dockerfile in ``BUILD_CONTEXT``."""
    base: str
    tag: str = Field(pattern=r"^[\w][\w.-]{0,127}$")
    """The tag the recipe's build is pushed under in the stack's repository and that pods pull."""
    args: dict[str, str] = {}
    """Build arguments no typed field gives (further pins); the typed fields' own are derived from them
    (``software.report.build_args``), and an entry here that repeats one is refused."""
    pin_deviations: dict[str, str] = {}
    """Pinned distributions allowed outside the image's SGLang Requires-Dist, each with why (upstream
    cited); the build's pin check (``# contract: pins``) refuses every other pin outside it."""
    required_args: tuple[str, ...] = ()
    """Build arguments with no default: pins not readable here, given at build time."""
    nccl_override: bool = False
    """The recipe replaces torch's NCCL with the profile's ``nccl`` (``NCCL_CU13_OVERRIDE``)."""
    digest_required: bool = False
    """The stack refuses the profile unless its image is pinned by ``@sha256:`` digest (the recipe
    resolves some pins at build time, so only the digest names what was built)."""


class Profile(_Model):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    seed_name: str
    """How the project's seed documents name this stack."""
    summary: str
    framework: Framework
    framework_source: Source
    megatron: Source
    sglang: SGLang
    cuda: str = Field(pattern=VERSION)
    torch: str = Field(pattern=VERSION)
    nccl: str = Field(pattern=VERSION)
    """The NCCL torch loads in the image (``torch.cuda.nccl.version()``), at least: the preflight checks the
    loaded one is not older. Read from the built image's record (``BUILT``) where one exists."""
    nccl_from_image: bool = False
    """True: ``nccl`` is the built image's own (its record); False: the minimum read from the pins (torch's
    Requires-Dist or the recipe's override), until the image is built and recorded."""
    efa_installer: str = Field(pattern=VERSION)
    aws_ofi_nccl: str = Field(pattern=VERSION)
    ray: str = Field(pattern=VERSION)
    """Ray in the image (KubeRay ``rayVersion``)."""
    a2a: tuple[Literal["off", "v1", "v2"], ...]
    """The values of ``deepep.version`` the image can run."""
    gin: bool = False
    """aws-ofi-nccl's GIN plugin with an NCCL that has GIN: DeepEP V2 across nodes over EFA."""
    checkpoint_on_stop: bool
    """``--save-trigger-sentinel`` exists: a run can be told to save now (Capacity Block end, cancel)."""
    wheels: Wheels | None = None
    """Miles' prebuilt wheels release the recipe installs (Miles profiles)."""
    refused_sglang: tuple[str, ...] = ()
    """SGLang flags the profile's versions refuse together with its a2a backends (``--sglang-<flag>``)."""
    image: Image

    @property
    def framework_commit_arg(self) -> str:
        """The recipe's build argument for the framework's commit (``MILES_COMMIT``, ``SLIME_COMMIT``)."""
        return f"{self.framework.value.upper()}_COMMIT"

    @property
    def workdir(self) -> str:
        """Where the image has the framework's checkout (its entry points)."""
        return f"/root/{self.framework.value}"

    @model_validator(mode="after")
    def _consistent(self) -> "Profile":
        if self.framework_source.commit is None and self.framework_commit_arg not in self.image.required_args:
            raise ValueError(f"{self.name}: no framework commit and none required at build time")
        if self.sglang.branch and self.sglang.commit is None and "SGLANG_COMMIT" not in self.image.required_args:
            raise ValueError(f"{self.name}: sglang.branch {self.sglang.branch} with no commit and none required at "
                             f"build time")
        if self.image.required_args and not self.image.digest_required:
            raise ValueError(f"{self.name}: pins resolved at build time need the image pinned by digest")
        if self.wheels and version_tuple(self.wheels.torch) != version_tuple(self.torch):
            raise ValueError(f"{self.name}: wheels: release {self.wheels.release} is built for torch "
                             f"{self.wheels.torch}, the image's torch is {self.torch}")
        for dist, why in self.image.pin_deviations.items():
            if not why.strip():
                raise ValueError(f"{self.name}: image.pinDeviations.{dist}: say why (the upstream source)")
        gin_ready = (self.gin and version_tuple(self.nccl) >= GIN_MIN_NCCL
                     and version_tuple(self.efa_installer) >= GIN_MIN_EFA_INSTALLER)
        if "v2" in self.a2a and not gin_ready:
            raise ValueError(f"{self.name}: DeepEP V2 over EFA needs NCCL GIN through aws-ofi-nccl >= 1.21 (EFA "
                             f"installer >= 1.50) and NCCL >= 2.31.2")
        return self


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def built_record(text: str) -> dict[str, str]:
    """``key=value`` lines of an image's ``/etc/rl-platform-image-versions`` (``#`` lines are comments)."""
    return dict(line.split("=", 1) for line in text.splitlines() if line.strip() and not line.startswith("#"))


def _with_record(name: str, row: dict, built: Path) -> dict:
    """The profile row, its NCCL taken from the built image's record where there is one."""
    path = built / f"{name}.versions"
    if not path.is_file():
        return row
    rec = built_record(path.read_text())
    where = f"{path.relative_to(path.parents[1])}"
    base = row["image"]["base"]
    if rec.get("base_image") != base:
        raise ValueError(f"{where}: base_image: {rec.get('base_image')}; the profile builds from {base}")
    have = rec.get("torch_nccl", "")
    if not re.fullmatch(VERSION, have) or version_tuple(have) < version_tuple(str(row["nccl"])):
        raise ValueError(f"{where}: torch_nccl: {have or 'missing'}; allowed: the NCCL the image loads, "
                         f"{row['nccl']} or newer (the profile's minimum)")
    return {**row, "nccl": have, "ncclFromImage": True}


def load(data: Path | None = None, built: Path | None = None) -> dict[str, Profile]:
    """The catalog in ``data``, each NCCL from its image record in ``built``; ValueError naming the file.
    Defaults: ``DATA`` and ``BUILT`` as they are when called (a test may point them at a copy)."""
    data, built = data or DATA, built or BUILT
    rows = yaml.safe_load(data.read_text())
    out = {name: Profile.model_validate({"name": name, **_with_record(name, row, built)}) for name, row in rows.items()}
    shared: dict[tuple[str, str], Profile] = {}
    for p in out.values():
        if p.wheels and p.wheels.release:
            other = shared.setdefault((p.wheels.repo, p.wheels.release), p)
            if other.torch != p.torch:
                raise ValueError(f"{data.name}: {p.name}.wheels.release: {p.wheels.release} is {other.name}'s, built "
                                 f"for torch {other.wheels.torch}; {p.name} runs torch {p.torch}")
    return out


@cache
def profiles() -> dict[str, Profile]:
    """The catalog, by name (``profiles.yaml``, with the built images' records)."""
    return load()


def names() -> list[str]:
    return list(profiles())


def profile(name: str) -> Profile:
    """The profile ``name``; ValueError listing the allowed names."""
    found = profiles().get(name)
    if found is None:
        raise ValueError(f"{name!r} is not a software profile; allowed: {', '.join(names())}")
    return found
