"""Builds the control plane's binaries from the Go module proxy, once per module and version.

Each component is one upstream module at the version the stacks pin (``controlplane.versions``), built
with ``go build`` from a small go.mod of ours that requires it. A module whose own go.mod replaces
modules with directories inside it (k8s.io/kubernetes's staging modules, Volcano's ``volcano.sh/apis``)
cannot be built with ``go install M@V`` (a dependency's replace directives are ignored), so the go.mod
we write repeats each upstream replace: the ones to a module version as they are, the ones to a
staging directory as the module it holds at the matching version (``k8s.io/api`` -> ``v0.35.3`` for
Kubernetes v1.35.3; Volcano's ``volcano.sh/apis`` at Volcano's own version), or, where the proxy does not
serve that version, as a copy of a served one with what the build lacks added (``Component.shims``: the
copy is made in the build directory, ``src/<component>-<version>/shims/``, and named by the replace).

Everything lives under one cache directory (``$MOE_RL_CONTROLPLANE_CACHE``, default
``~/.cache/moe-rl-controlplane``): Go's module and build caches and ``bin/<component>-<version>/``.
A component whose binaries are there is not rebuilt, so a warm start takes no compile time.

    python -m controlplane.build            # builds what is missing, prints the binary directories
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from controlplane.versions import COMPONENTS, Component, Shim

CACHE = Path(os.environ.get("MOE_RL_CONTROLPLANE_CACHE", Path.home() / ".cache" / "moe-rl-controlplane"))


def go_env() -> dict[str, str]:
    """The environment every ``go`` call runs in: the caches under ``CACHE``, the machine's toolchain."""
    return {**os.environ, "GOMODCACHE": str(CACHE / "go" / "mod"), "GOCACHE": str(CACHE / "go" / "build"),
            "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}


def go(*args: str, cwd: Path) -> str:
    done = subprocess.run(["go", *args], cwd=cwd, env=go_env(), capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"go {' '.join(args)} (in {cwd}) failed:\n{done.stderr[-4000:]}")
    return done.stdout


def upstream_gomod(module: str, version: str) -> str:
    """The text of ``module@version``'s own go.mod, from the proxy."""
    info = json.loads(go("mod", "download", "-json", f"{module}@{version}", cwd=CACHE))
    return Path(info["GoMod"]).read_text()


def replaces(gomod: str) -> list[tuple[str, str]]:
    """``(old, new)`` of every replace directive in ``gomod`` (block and single-line forms)."""
    found: list[tuple[str, str]] = []
    block = False
    for raw in gomod.splitlines():
        line = raw.split("//")[0].strip()
        if line.startswith("replace ("):
            block = True
            continue
        if block and line == ")":
            block = False
            continue
        if line.startswith("replace "):
            line = line[len("replace "):]
        elif not block:
            continue
        if "=>" in line:
            old, new = (part.strip() for part in line.split("=>"))
            found.append((old.split()[0], new))
    return found


def shim_dir(module: str) -> str:
    """The replace target of a shimmed module, relative to the build directory."""
    return "./shims/" + module.replace("/", "_")


def staging_version(module: str, component: Component) -> str:
    """The version of a module that ``component``'s module keeps in a directory of its own."""
    if module.startswith("k8s.io/") and component.module == "k8s.io/kubernetes":
        return "v0" + component.version[2:]  # v1.35.3 -> v0.35.3, the staging modules' tags
    return component.version


def gomod(component: Component) -> str:
    """Our go.mod for ``component``: its module required at the pinned version, its replaces repeated."""
    upstream = upstream_gomod(component.module, component.version)
    lines = [f"module moe-rl-controlplane/{component.name}", "", "go 1.26", "", "require ("]
    lines += [f"\t{m} {v}" for m, v in [(component.module, component.version), *component.extra_requires]]
    lines += [")", "", "replace ("]
    for old, new in replaces(upstream):
        if new.startswith((".", "/")):
            if "FORBIDDEN" in new:  # etcd's guard against importing a module it must not (./FORBIDDEN_DEPENDENCY)
                continue
            new = shim_dir(old) if old in component.shims else f"{old} {staging_version(old, component)}"
        lines.append(f"\t{old} => {new}")
    return "\n".join(lines + [")", ""])


BUILD_SECONDS = "BUILD_SECONDS"
"""Beside a component's binaries: the wall seconds its cold build took (module downloads included)."""


def bin_dir(component: Component) -> Path:
    """Where ``component``'s binaries are kept, one directory per component and version."""
    return CACHE / "bin" / f"{component.name}-{component.version}"


def copy_shim(shim: Shim, target: Path) -> None:
    """The served ``shim.module@shim.version`` copied from the module cache to ``target``, its files added."""
    info = json.loads(go("mod", "download", "-json", f"{shim.module}@{shim.version}", cwd=CACHE))
    shutil.copytree(info["Dir"], target, copy_function=shutil.copyfile)
    for directory, _, _ in os.walk(target):
        os.chmod(directory, 0o755)  # the module cache's directories are read-only
    for path, text in shim.files.items():
        (target / path).write_text(text)


def build(component: Component) -> Path:
    """The directory of ``component``'s binaries, built first when not all of them are there."""
    target = bin_dir(component)
    if all((target / name).is_file() for name in component.binaries):
        return target
    start = time.monotonic()
    work = CACHE / "src" / f"{component.name}-{component.version}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "go.mod").write_text(gomod(component))
    for shim in component.shims.values():
        copy_shim(shim, work / shim_dir(shim.module))
    for name, source in component.mains.items():
        (work / name).mkdir()
        (work / name / "main.go").write_text(source)
    staging = work / "out"
    staging.mkdir()
    for name, package in component.binaries.items():
        go("build", "-trimpath", "-ldflags", component.ldflags, "-o", str(staging / name), package, cwd=work)
    (staging / BUILD_SECONDS).write_text(f"{time.monotonic() - start:.0f}\n")
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging.rename(target)
    return target


def main() -> int:
    CACHE.mkdir(parents=True, exist_ok=True)
    wanted = set(sys.argv[1:]) or {c.name for c in COMPONENTS}
    for component in COMPONENTS:
        if component.name not in wanted:
            continue
        start = time.monotonic()
        path = build(component)
        print(f"{component.name} {component.module}@{component.version}: {path} "
              f"({time.monotonic() - start:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
