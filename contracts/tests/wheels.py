"""Real wheels from the package registry (``pip download --no-deps``), cached under
``.venv-contracts/cache/wheels`` (or ``$CONTRACTS_CACHE``), unpacked into a site-packages-like folder
exactly as pip lays them out (a wheel is a zip of its install tree)."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import ROOT

CACHE = Path(os.environ.get("CONTRACTS_CACHE", ROOT / ".venv-contracts" / "cache"))


def wheel(dist: str, version: str) -> Path:
    """The wheel of ``dist==version`` for this platform, downloaded once."""
    folder = CACHE / "wheels"
    norm = dist.replace("-", "_").lower()
    have = [w for w in folder.glob("*.whl") if w.name.lower().startswith(f"{norm}-{version}-")]
    if not have:
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        "-d", str(folder), f"{dist}=={version}"], check=True)
        have = [w for w in folder.glob("*.whl") if w.name.lower().startswith(f"{norm}-{version}-")]
    assert len(have) == 1, (dist, version, have)
    return have[0]


def unpack(whl: Path, site: Path, only: tuple[str, ...] = ()) -> Path:
    """Install ``whl``'s files into ``site`` as pip would (``only``: just the members under these
    prefixes, e.g. the ``.dist-info`` folder)."""
    with zipfile.ZipFile(whl) as z:
        for member in z.namelist():
            if not only or member.startswith(only):
                z.extract(member, site)
    return site


def metadata(whl: Path) -> str:
    """The wheel's ``METADATA`` (its Requires-Dist)."""
    with zipfile.ZipFile(whl) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return z.read(name).decode()


def installed(site: Path, dist: str, version: str) -> None:
    """A dist-info as pip leaves it for ``dist==version`` (all importlib.metadata reads of it)."""
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")


def run_in(site: Path, code: str, env: dict[str, str], deps: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``code`` under ``python3 -S`` with only ``site`` on the path (as an image's site-packages), plus
    ``packaging`` (which pip vendors in the images) and the pure-Python modules ``deps`` (a wheel's own
    Requires-Dist, taken from this environment)."""
    for name in ("packaging", *deps):
        mod = importlib.import_module(name)
        src = Path(mod.__file__)
        if src.name == "__init__.py":
            shutil.copytree(src.parent, site / name, dirs_exist_ok=True)
        else:
            shutil.copy(src, site / src.name)
    return subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          env={**env, "PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
