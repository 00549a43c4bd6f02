"""What ``python -m workloads.cli.runs profiles`` prints: each profile with its pins, and the build
command of its image (the tag the stack pulls is the profile's, so the build pushes that tag)."""

from __future__ import annotations

import shlex
from pathlib import Path

from . import BUILD_CONTEXT, BUILT, Profile, load, profile, profiles
from .recipe import base_args, declared

ROOT = Path(__file__).resolve().parents[1]


def pins(p: Profile) -> list[str]:
    fw, mg = p.framework_source, p.megatron
    return [
        f"{p.name}: {p.summary}",
        f"  seed's name: {p.seed_name}",
        f"  {p.framework.value}: {fw.repo} {fw.ref} {fw.commit or f'({p.framework_commit_arg} at build time)'}",
        f"  megatron: {mg.repo} {mg.ref} {mg.commit or '(at build time)'}",
        f"  sglang: {p.sglang.version} ({' '.join(filter(None, (p.sglang.source, p.sglang.branch)))}"
        + (f" {p.sglang.commit or '(SGLANG_COMMIT at build time)'}" if p.sglang.branch else "") + ")",
        f"  cuda {p.cuda}, torch {p.torch}, nccl {p.nccl} "
        f"({'the built image' if p.nccl_from_image else 'at least; the built image is not recorded'}), "
        f"efa installer {p.efa_installer} "
        f"(aws-ofi-nccl {p.aws_ofi_nccl}), ray {p.ray}",
        f"  deepep.version: {', '.join(p.a2a)}; DeepEP V2 GIN: {'yes' if p.gin else 'no'}; "
        f"checkpoint on stop: {'yes (--save-trigger-sentinel)' if p.checkpoint_on_stop else 'no (periodic saves only)'}",
        f"  image: {p.image.recipe} from {p.image.base}, tag {p.image.tag}"
        + (f"; build arguments {', '.join(p.image.required_args)} required; pinned by digest only"
           if p.image.required_args else ""),
    ]


def typed_args(p: Profile) -> dict[str, str]:
    """The build arguments that are typed profile fields, by the name the recipes give them (None: the
    profile has no value; the recipe's default, or a required argument, stands)."""
    repo, _, tag = p.image.base.rpartition(":")
    base = base_args(ROOT / p.image.recipe)
    if repo not in base:
        raise ValueError(f"{p.name}: image.base: {p.image.base}; the recipe {p.image.recipe} builds from "
                         f"{', '.join(base) or 'no FROM <image>:${{ARG}}'}")
    wheels = ({"WHEELS_REPO": p.wheels.repo, "WHEELS_TAG_X86": p.wheels.release or "", "WHEELS_TORCH": p.wheels.torch}
              if p.wheels else {})
    return {base[repo]: tag, p.framework_commit_arg: p.framework_source.commit,
            "MEGATRON_BRANCH": p.megatron.ref, "MEGATRON_COMMIT": p.megatron.commit,
            "SGLANG_BRANCH": p.sglang.branch, "SGLANG_COMMIT": p.sglang.commit, "EXPECT_SGLANG": p.sglang.version,
            "NCCL_CU13_OVERRIDE": p.nccl if p.image.nccl_override else None,
            "DEEPEP_V2": "1" if "v2" in p.a2a else "0",
            "RAY_VERSION": p.ray, "EFA_INSTALLER_VERSION": p.efa_installer, "AWS_OFI_NCCL_VERSION": p.aws_ofi_nccl,
            **wheels, "PIN_DEVIATIONS": " ".join(sorted(p.image.pin_deviations)) or None}


def build_args(p: Profile) -> dict[str, str]:
    """Every build argument the profile sets: its typed fields (``typed_args``) that its recipe declares,
    then its ``image.args`` (what no field types: further pins). ValueError for an ``image.args`` entry
    that a field gives, naming it."""
    typed = typed_args(p)
    twice = sorted(set(p.image.args) & set(typed))
    if twice:
        raise ValueError(f"{p.name}: image.args.{twice[0]}: given by a typed field of the profile "
                         f"(software.report.typed_args); set that field instead")
    declared_here = declared(ROOT / p.image.recipe)
    return {**{k: v for k, v in typed.items() if v is not None and k in declared_here}, **p.image.args}


def required_source(p: Profile, arg: str) -> str:
    """Where a build argument given at build time comes from, as the unset variable's one-line refusal."""
    if arg == p.framework_commit_arg:
        found = f"{p.framework_source.repo} {p.framework_source.ref}"
    elif arg == "SGLANG_COMMIT":
        found = f"{p.sglang.source} branch {p.sglang.branch}"
    else:
        found = p.image.args.get(arg.replace("_COMMIT", "_REPO"), "workloads/image/README.md")
    return f"set {arg} to the commit of {found}"


def build_command(p: Profile) -> str:
    """``docker buildx build`` of the profile's image into ``$REPO`` (the stack's ``imageRepository``
    output), the required build arguments taken from the environment of the same name: unset, the
    command stops before it runs, saying what to set and where it comes from (``required_source``)."""
    args = [f"--build-arg {k}={shlex.quote(v)}" for k, v in build_args(p).items()]
    args += [f'--build-arg {k}="${{{k}:?{required_source(p, k)}}}"' for k in p.image.required_args]
    return " \\\n  ".join(["docker buildx build --platform linux/amd64 --push", f"-f {p.image.recipe}", *args,
                          f'-t "$REPO:{p.image.tag}" {BUILD_CONTEXT}'])


def report(name: str | None = None, build: bool = False) -> list[str]:
    chosen = [profile(name)] if name else list(profiles().values())
    if build:
        return [build_command(p) for p in chosen]
    return [line for p in chosen for line in pins(p)]


def record_image(name: str, versions: str, built: Path = BUILT) -> list[str]:
    """Keep what the built image of profile ``name`` reports of itself (its ``/etc/rl-platform-image-versions``,
    ``docker run --rm <image> cat /etc/rl-platform-image-versions``) as ``built/<name>.versions``: from then
    on the profile's NCCL is the image's. ValueError, nothing kept, when it is not that profile's image."""
    built.mkdir(parents=True, exist_ok=True)
    path = built / f"{name}.versions"
    old = path.read_text() if path.exists() else None
    path.write_text(versions if versions.endswith("\n") else versions + "\n")
    try:
        got = load(built=built)[name]
    except ValueError:
        path.unlink() if old is None else path.write_text(old)
        raise
    profiles.cache_clear()
    return [f"{name}: recorded {path.name}; nccl {got.nccl} (the built image)"]
