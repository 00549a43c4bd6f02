"""Every repository path that the offline plan prints or a document names exists.

A path is taken to be this repository's when its folder exists here (``components/x.py``: the
folder ``components`` does); paths under folders this repository does not have are upstream
citations (``docs/models/...`` of Miles) and are not checked. ``UPSTREAM`` lists the few upstream
paths whose folder happens to exist here too.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from conftest import ROOT

UPSTREAM = {
    "tests/test_intranode.py": "deepseek-ai/DeepEP's intranode test, cited as not run",
    "workloads/image/wheels": "the folder the image build fills with wheels (workloads/image/README.md)",
}

PATH = re.compile(r"(?<![\w/.:@<>*{}-])((?:[\w.<>*{}-]+/)+[\w.<>*{}-]*[\w*])")
"""``a/b/c.ext``, not inside a URL or an absolute path; placeholders (``<stack>``) and globs kept."""


def named_paths(text: str) -> set[str]:
    """Paths in ``text`` whose folder exists in this repository, globs as written."""
    found = set()
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".")
        if "<" in path or "{" in path:
            continue  # a placeholder, e.g. stacks/Pulumi.<stack>.yaml
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


@pytest.mark.parametrize("document", documents())
def test_every_path_a_document_names_exists(document):
    assert missing(named_paths((ROOT / document).read_text())) == []


def test_every_path_the_plan_prints_exists():
    from analysis.plan import plan_stack, render_text
    plan, _ = plan_stack("p5en-prod")
    assert missing(named_paths(render_text(plan))) == []
