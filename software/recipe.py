"""The image recipes as data: their `ARG` defaults and their marked check snippets, pulled out of the
Dockerfiles themselves so a test runs exactly what the build runs (not a copy).

A snippet is marked by a comment line ``# contract: NAME`` above the instruction that holds it, a
heredoc (``COPY <<'EOF' /path`` or ``RUN ... python3 - <<'EOF'``, opened on any of the instruction's
lines): the snippet is the heredoc's body.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MARKER = re.compile(r"^#\s*contract:\s*([\w.-]+)\s*$")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
ARG = re.compile(r"^ARG (\w+)(?:=(.*))?$")
FROM = re.compile(r"^FROM\s+([^\s:]+):\$\{(\w+)\}")


@dataclass(frozen=True)
class Snippet:
    name: str
    code: str
    instruction: str
    """The instruction's first line (``COPY <<'EOF' /usr/local/...``), for messages."""


def snippets(dockerfile: Path) -> dict[str, Snippet]:
    """Every marked snippet of ``dockerfile``, by name; ValueError for a marker with no snippet under it."""
    lines = dockerfile.read_text().splitlines()
    found: dict[str, Snippet] = {}
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i].strip())
        i += 1
        if not m:
            continue
        while i < len(lines) and lines[i].lstrip().startswith("#"):
            i += 1  # further comment lines between the marker and its instruction
        first, start = lines[i], i
        while HEREDOC.search(lines[i]) is None and lines[i].endswith("\\") and i + 1 < len(lines):
            i += 1  # the heredoc opens on a continuation line of the instruction
        here = HEREDOC.search(lines[i])
        if here is None:
            raise ValueError(f"{dockerfile}:{start + 1}: contract {m.group(1)!r} marks no heredoc")
        end = next(j for j in range(i + 1, len(lines)) if lines[j] == here.group(2))
        code = "\n".join(lines[i + 1:end]) + "\n"
        i = end + 1
        if m.group(1) in found:
            raise ValueError(f"{dockerfile}:{start + 1}: contract {m.group(1)!r} marked twice")
        found[m.group(1)] = Snippet(m.group(1), code, first.strip())
    return found


def arg_defaults(dockerfile: Path) -> dict[str, str]:
    """``ARG NAME=default`` of the recipe (the last declaration wins, as in a stage that redeclares it)."""
    out: dict[str, str] = {}
    for line in dockerfile.read_text().splitlines():
        m = ARG.match(line.strip())
        if m and m.group(2) is not None:
            out[m.group(1)] = m.group(2).strip().strip('"')
    return out


def declared(dockerfile: Path) -> set[str]:
    """Every ``ARG`` name the recipe declares, with or without a default."""
    return {m.group(1) for line in dockerfile.read_text().splitlines() if (m := ARG.match(line.strip()))}


def base_args(dockerfile: Path) -> dict[str, str]:
    """``FROM <image>:${ARG}`` of the recipe: the build argument that holds each base image's tag."""
    return {m.group(1): m.group(2) for line in dockerfile.read_text().splitlines() if (m := FROM.match(line.strip()))}
