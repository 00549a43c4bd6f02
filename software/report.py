"""What ``python -m workloads.cli.runs profiles`` prints: each profile with its pins, and the build
command of its image (the tag the stack pulls is the profile's, so the build pushes that tag)."""

from __future__ import annotations

import shlex
from pathlib import Path

from . import BUILD_CONTEXT, BUILT, Profile, load, profiles


def pins(p: Profile) -> list[str]:
    fw, mg = p.framework_source, p.megatron
    return [
        f"{p.name}: {p.summary}",
        f"  seed's name: {p.seed_name}",
        f"  {p.framework.value}: {fw.repo} {fw.ref} {fw.commit or '(MILES_COMMIT at build time)'}",
        f"  megatron: {mg.repo} {mg.ref} {mg.commit or '(at build time)'}",
        f"  sglang: {p.sglang.version} ({p.sglang.source})",
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


def build_args(p: Profile) -> dict[str, str]:
    """Every build argument the profile sets: its ``image.args``, its wheels release and that release's
    torch, and the pins allowed outside its SGLang's Requires-Dist."""
    out = dict(p.image.args)
    if p.wheels:
        out |= {"WHEELS_REPO": p.wheels.repo, "WHEELS_TAG_X86": p.wheels.release or "", "WHEELS_TORCH": p.wheels.torch}
    if p.image.pin_deviations:
        out["PIN_DEVIATIONS"] = " ".join(sorted(p.image.pin_deviations))
    return out


def build_command(p: Profile) -> str:
    """``docker buildx build`` of the profile's image into ``$REPO`` (the stack's ``imageRepository``
    output), the required build arguments taken from the environment of the same name."""
    args = [f"--build-arg {k}={shlex.quote(v)}" for k, v in build_args(p).items()]
    args += [f'--build-arg {k}="${{{k}:?required}}"' for k in p.image.required_args]
    return " \\\n  ".join(["docker buildx build --platform linux/amd64 --push", f"-f {p.image.recipe}", *args,
                          f'-t "$REPO:{p.image.tag}" {BUILD_CONTEXT}'])


def report(name: str | None = None, build: bool = False) -> list[str]:
    chosen = [profiles()[name]] if name else list(profiles().values())
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
