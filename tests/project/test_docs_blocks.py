"""Every code block of docs/*.md runs as written, or is marked as a fragment whose
complete version is one link away (README.md's blocks: tests/project/test_readme.py).

A fragment is marked by the last line of text before its block, or once for the
whole page by a line of its own:

    Complete and runnable: [examples/docs/x.py](../examples/docs/x.py)
    Checked by: [tests/test_x.py](../tests/test_x.py)
    The blocks of this page, complete and runnable: [examples/docs/x.py](...)

The link must name a file of the repository. An example under examples/ is run here
(a fresh interpreter, exit status 0: the examples assert what they show); a test file
is run by the suite itself. An unmarked ``python`` block is run as written; any other
unmarked block (a console transcript, a TOML table) fails: it cannot run as written.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple

import pytest
from conftest import REPOSITORY, clean_environment

DOCS = REPOSITORY / "docs"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
MARK = re.compile(r"^(Complete and runnable|Checked by): \[[^\]]+\]\(([^)]+)\)")
PAGE_MARK = re.compile(r"^The blocks of this page, complete and runnable: \[[^\]]+\]\(([^)]+)\)",
                       re.M)
# Pages whose blocks another test runs as written (it says how, in its docstring).
RUN_ELSEWHERE: "dict[str, str]" = {
    # its blocks are files of one project and the outputs shown under them
    "export.md": "tests/packs/export/test_docs.py",
}


def blocks() -> List[Tuple[str, int, str, str, Optional[str]]]:
    """(page, line, language, body, linked file or None) for every block of docs/."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        page_mark = PAGE_MARK.search(text)
        for match in BLOCK.finditer(text):
            before = [line for line in text[:match.start()].splitlines() if line.strip()]
            mark = MARK.match(before[-1]) if before else None
            link = mark.group(2) if mark else page_mark.group(1) if page_mark else None
            line = text[:match.start()].count("\n") + 1
            found.append((page.name, line, match.group(1), match.group(2), link))
    return found


BLOCKS = [block for block in blocks() if block[0] not in RUN_ELSEWHERE]


def linked(page: str, link: str) -> Path:
    return (DOCS / link).resolve()


@pytest.mark.parametrize("page, line, language, body, link", BLOCKS,
                         ids=[f"{page}:{line}" for page, line, *_ in BLOCKS])
def test_block_runs_as_written_or_links_its_complete_version(page, line, language, body, link,
                                                              tmp_path):
    if link is None:
        assert language == "python", (
            f"docs/{page}:{line}: a {language or 'plain'} block cannot run as written: mark it "
            f"with 'Complete and runnable: [file](link)' or 'Checked by: [test](link)' on the "
            f"line before it")
        script = tmp_path / "block.py"
        script.write_text(body)
        result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                                text=True, env=clean_environment(), timeout=300)
        assert result.returncode == 0, f"docs/{page}:{line} fails as written:\n{result.stderr}"
        return
    target = linked(page, link)
    assert target.is_file(), f"docs/{page}:{line} links {link}, which is not a file"
    assert REPOSITORY in target.parents, f"docs/{page}:{line} links outside the repository"


EXAMPLES = sorted({linked(page, link) for page, _, _, _, link in BLOCKS
                   if link and "/examples/" in str(linked(page, link))})


@pytest.mark.stack   # the examples use the real stack (torch, mmengine)
@pytest.mark.parametrize("example", EXAMPLES, ids=[example.name for example in EXAMPLES])
def test_linked_example_runs(example, tmp_path):
    result = subprocess.run([sys.executable, str(example)], cwd=tmp_path, capture_output=True,
                            text=True, env=clean_environment(), timeout=300)
    assert result.returncode == 0, f"{example} fails:\n{result.stdout}\n{result.stderr}"


def test_pages_run_elsewhere_have_their_runner():
    for page, runner in RUN_ELSEWHERE.items():
        if (DOCS / page).exists():
            assert (REPOSITORY / runner).is_file(), f"docs/{page} says {runner} runs it"
