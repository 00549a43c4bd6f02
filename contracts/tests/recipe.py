"""The check snippets of the image recipes, pulled out of the Dockerfiles themselves, so a contract test
runs exactly what the build runs (not a copy).

A snippet is marked by a comment line ``# contract: NAME`` directly above the instruction that holds it.
The instruction is either a heredoc (``COPY <<'EOF' /path`` or ``RUN python3 - <<'EOF'``: the snippet is
the heredoc's body) or a shell line with one ``python3 -c '...'`` / ``python3 -c "..."`` (the snippet is
that argument, after Docker has joined the instruction's continuation lines).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MARKER = re.compile(r"^#\s*contract:\s*([\w.-]+)\s*$")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
PY_SINGLE = re.compile(r"python3? -c '([^']*)'")
PY_DOUBLE = re.compile(r'python3? -c "((?:[^"\\]|\\.)*)"')
ARG = re.compile(r"^ARG (\w+)(?:=(.*))?$")


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
        here = HEREDOC.search(first)
        if here:
            end = next(j for j in range(i + 1, len(lines)) if lines[j] == here.group(2))
            code = "\n".join(lines[i + 1:end]) + "\n"
            i = end + 1
        else:
            joined = ""
            while i < len(lines):
                line = lines[i]
                i += 1
                if line.endswith("\\"):
                    joined += line[:-1]
                    continue
                joined += line
                break
            py = PY_SINGLE.search(joined) or PY_DOUBLE.search(joined)
            if py is None:
                raise ValueError(f"{dockerfile}:{start + 1}: contract {m.group(1)!r} marks no heredoc and no python3 -c")
            code = py.group(1) if py.re is PY_SINGLE else re.sub(r"\\(.)", r"\1", py.group(1))
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
