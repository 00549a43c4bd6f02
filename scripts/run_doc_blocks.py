"""Run the documents' offline code blocks as written, in bash, from the repository root.

A fenced block whose info string is ``bash offline`` (or ``bash offline slow``) needs no AWS account,
cluster or network; ``bash aws`` marks one that does, which is never run. The main suite runs the
``offline`` blocks that are plain ``python -m`` lines in process (``tests/test_getting_started.py``);
this script, a stage of ``.ci/run`` after the main suite, runs every offline block in bash, with the
running interpreter's folder first on ``PATH`` (so ``python`` is the virtualenv's), and exits 1 naming
each block that failed. Usage: ``.venv/bin/python scripts/run_doc_blocks.py [page.md ...]``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^(\s*)```(\S*)(.*)$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it starts (1-based line of its fence), its info string's words
    after the language, and its text, dedented."""
    page: Path
    line: int
    language: str
    marks: tuple[str, ...]
    text: str

    @property
    def offline(self) -> bool:
        return self.language == "bash" and "offline" in self.marks

    @property
    def slow(self) -> bool:
        return "slow" in self.marks

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page}:{self.line}"


def blocks(page: Path, text: str | None = None) -> list[Block]:
    """Every fenced block of ``page`` (its ``text`` when given), in order."""
    found, opened, body = [], None, []
    for number, line in enumerate((page.read_text() if text is None else text).split("\n"), 1):
        fence = FENCE.match(line)
        if opened is None and fence:
            opened, body = (number, fence.group(2), tuple(fence.group(3).split())), []
        elif opened is not None and fence and not fence.group(2) and not fence.group(3).strip():
            found.append(Block(page, opened[0], opened[1], opened[2], textwrap.dedent("\n".join(body))))
            opened = None
        elif opened is not None:
            body.append(line)
    return found


def pages() -> list[Path]:
    """The documents whose blocks count: README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def run(block: Block) -> tuple[int, str, float]:
    """(exit code, output, seconds) of the block in ``bash -euo pipefail`` at the repository root."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    start = time.monotonic()
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - start


def main(argv: list[str]) -> int:
    chosen = [Path(a).resolve() for a in argv] or pages()
    failed, total = [], 0.0
    for block in (b for page in chosen for b in blocks(page) if b.offline):
        rc, output, seconds = run(block)
        total += seconds
        print(f"{'ok  ' if rc == 0 else 'FAIL'} {seconds:6.1f} s  {block.where()}")
        if rc:
            failed.append(block.where())
            print(textwrap.indent(output[-4000:], "    "))
    print(f"{len(failed)} failed, {total:.1f} s in all" + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
