"""Every repository path that the offline plan prints or a document names exists.

A path is taken to be this repository's when its folder exists here (``components/x.py``: the
folder ``components`` does); paths under folders this repository does not have are upstream
citations (``docs/models/...`` of Miles) and are not checked. ``UPSTREAM`` lists the few upstream
paths whose folder happens to exist here too. A path that starts with ``./`` or ``../`` is a page's
own relative link (``docs/design/x.md`` linking ``../getting-started/plan.md``): it is read from the
page's folder. A link to a heading (``plan.md#stacks``, ``#resume``) names a heading of that page.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

UPSTREAM = {
    "tests/test_intranode.py": "deepseek-ai/DeepEP's intranode test, cited as not run",
    "workloads/image/wheels": "the folder the image build fills with wheels (workloads/image/README.md)",
}

PATH = re.compile(r"(?<![\w/.:@<>*{}-])((?:[\w.<>*{}-]+/)+[\w.<>*{}-]*[\w*])")
"""``a/b/c.ext``, not inside a URL or an absolute path; placeholders (``<stack>``) and globs kept."""


def named_paths(text: str, folder_of_text: Path = ROOT) -> set[str]:
    """Paths in ``text`` whose folder exists in this repository, globs as written, relative ones
    (``../x.md``) read from ``folder_of_text`` and given from the repository root."""
    found = set()
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".")
        if "<" in path or "{" in path:
            continue  # a placeholder, e.g. stacks/Pulumi.<stack>.yaml
        if path.startswith(("./", "../")):
            path = os.path.relpath(os.path.normpath(folder_of_text / path), ROOT)
        folder = path.rpartition("/")[0]
        if "*" not in folder and (ROOT / folder).is_dir():
            found.add(path)
    return found


def missing(paths: set[str]) -> list[str]:
    return sorted(p for p in paths if p not in UPSTREAM
                  and not (any(ROOT.glob(p)) if "*" in p else (ROOT / p).exists()))


def documents() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True)
    return listed.stdout.split()


def test_the_path_finder_sees_a_moved_file():
    assert missing(named_paths("typical create times in `components/create_times.py`.")) == [
        "components/create_times.py"]
    assert missing(named_paths("see analysis/create_times.py, tests/test_plan*.py and stacks/Pulumi.<stack>.yaml; "
                               "https://github.com/x/y/blob/main/components/z.py")) == []


def test_a_relative_link_is_read_from_its_pages_folder():
    docs = ROOT / "docs" / "design"
    assert missing(named_paths("[plan](../getting-started/plan.md), [root](../../README.md)", docs)) == []
    assert missing(named_paths("[moved](../getting-started/gone.md)", docs)) == ["docs/getting-started/gone.md"]


LINK = re.compile(r"\]\(([^()\s#]*)#([^()\s]+)\)")
"""``[text](page.md#anchor)`` and ``[text](#anchor)``."""


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``page``: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"^\s*```.*?^\s*```", "", page.read_text(), flags=re.M | re.S)  # no headings in code
    return {re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def broken_anchors(page: Path, text: str) -> list[str]:
    """``target#anchor`` links of ``text`` (found in ``page``) whose target exists but has no such heading."""
    broken = []
    for target, anchor in LINK.findall(text):
        linked = (page.parent / target) if target else page
        if linked.suffix == ".md" and linked.exists() and anchor not in anchors(linked):
            broken.append(f"{target}#{anchor}")
    return broken


def test_the_anchor_finder_sees_a_missing_heading():
    readme = ROOT / "README.md"
    assert broken_anchors(readme, "[s](#set-up) [g](docs/design/README.md#what-it-builds)") == []
    assert broken_anchors(readme, "[d](#deploy) [g](docs/design/README.md#no-such)") == [
        "#deploy", "docs/design/README.md#no-such"]


@pytest.mark.parametrize("document", documents())
def test_every_heading_a_document_links_exists(document):
    assert broken_anchors(ROOT / document, (ROOT / document).read_text()) == []


@pytest.mark.parametrize("document", documents())
def test_every_path_a_document_names_exists(document):
    assert missing(named_paths((ROOT / document).read_text(), (ROOT / document).parent)) == []


def test_every_path_the_plan_prints_exists():
    from analysis.plan import plan_stack, render_text
    plan, _ = plan_stack("p5en-prod")
    assert missing(named_paths(render_text(plan))) == []
