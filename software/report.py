"""What ``python -m workloads.runs profiles`` prints: each profile with its pins, and the build
command of its image (the tag the stack pulls is the profile's, so the build pushes that tag)."""

from __future__ import annotations

import shlex

from . import Profile, profiles


def pins(p: Profile) -> list[str]:
    fw, mg = p.framework_source, p.megatron
    return [
        f"{p.name}: {p.summary}",
        f"  seed's name: {p.seed_name}",
        f"  {p.framework.value}: {fw.repo} {fw.ref} {fw.commit or '(MILES_COMMIT at build time)'}",
        f"  megatron: {mg.repo} {mg.ref} {mg.commit or '(at build time)'}",
        f"  sglang: {p.sglang.version} ({p.sglang.source})",
        f"  cuda {p.cuda}, torch {p.torch}, nccl {p.nccl}, efa installer {p.efa_installer} "
        f"(aws-ofi-nccl {p.aws_ofi_nccl}), ray {p.ray}",
        f"  deepep.version: {', '.join(p.a2a)}; DeepEP V2 GIN: {'yes' if p.gin else 'no'}; "
        f"checkpoint on stop: {'yes (--save-trigger-sentinel)' if p.checkpoint_on_stop else 'no (periodic saves only)'}",
        f"  image: {p.image.recipe} from {p.image.base}, tag {p.image.tag}"
        + (f"; build arguments {', '.join(p.image.required_args)} required; pinned by digest only"
           if p.image.required_args else ""),
    ]


def build_command(p: Profile) -> str:
    """``docker buildx build`` of the profile's image into ``$REPO`` (the stack's ``imageRepository``
    output), the required build arguments taken from the environment of the same name."""
    args = [f"--build-arg {k}={shlex.quote(v)}" for k, v in p.image.args.items()]
    args += [f'--build-arg {k}="${{{k}:?required}}"' for k in p.image.required_args]
    return " \\\n  ".join(["docker buildx build --platform linux/amd64 --push", f"-f {p.image.recipe}", *args,
                          f'-t "$REPO:{p.image.tag}" workloads/image'])


def report(name: str | None = None, build: bool = False) -> list[str]:
    chosen = [profiles()[name]] if name else list(profiles().values())
    if build:
        return [build_command(p) for p in chosen]
    return [line for p in chosen for line in pins(p)]
