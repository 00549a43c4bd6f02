"""One generated section of BENCHMARKS.md: a benchmark writes its figures between its own BEGIN and END
markers, leaving every other section as it is (a section not there yet goes at the end)."""

from __future__ import annotations

from pathlib import Path


def rewrite(target: Path, text: str, begin: str, end: str) -> None:
    """``target`` with ``text`` (which starts with ``begin`` and ends with ``end``) in place of its section."""
    old = target.read_text()
    if begin in old and end in old:
        old = old[:old.index(begin)] + text + old[old.index(end) + len(end):]
    else:
        old = old.rstrip("\n") + "\n\n" + text + "\n"
    target.write_text(old)
