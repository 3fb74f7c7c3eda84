"""Every Python block of the repository's README.md and docs/*.md, run as
written against the real server.

A block marked ``no-run: why`` in its info string is left out (the Rust test
``cargo test -p wsfs-tests --test docs`` checks that every block is run by a
test or says why not). The address the docs use, ``127.0.0.1:50051``, is the
test server's; ``WSFS_SERVER`` names it too. A block that needs a package
this interpreter lacks (weakincentives needs Python 3.12) is skipped unless
``WSFS_REQUIRE_SEED_CLIENTS=1`` (CI's seed-clients venv) makes that a
failure.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable, Dict, List, Tuple

import pytest

from conftest import REPO, Server

DOCS_ADDRESS = "127.0.0.1:50051"
FENCE = re.compile(r"^(\s*)(`{3,})(.*)$")


@dataclass
class Block:
    file: str
    line: int
    heading: str
    info: str
    code: str

    @property
    def name(self) -> str:
        return f"{self.file}:{self.line}"


def blocks() -> List[Block]:
    """The fenced blocks of README.md and docs/*.md, in order."""
    found = []
    files = ["README.md"] + sorted(
        os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md"))
    )
    for name in files:
        with open(os.path.join(REPO, name), encoding="utf-8") as f:
            lines = f.read().split("\n")
        heading, i = "", 0
        while i < len(lines):
            line = lines[i]
            opened = FENCE.match(line)
            if not opened:
                if line.startswith("#"):
                    heading = line.lstrip("#").strip()
                i += 1
                continue
            indent, ticks, info = opened.group(1), opened.group(2), opened.group(3).strip()
            body, j = [], i + 1
            while j < len(lines) and lines[j].strip() != ticks:
                body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
                j += 1
            found.append(Block(name, i + 1, heading, info, "\n".join(body) + "\n"))
            i = j + 1
    return found


def python_blocks() -> List[Block]:
    return [
        b
        for b in blocks()
        if b.info.replace(",", " ").split()[:1] == ["python"] and "no-run:" not in b.info
    ]


def short_tour(out: List[str], tmp) -> None:
    assert out[0] == "- ship it"
    assert "notes/todo.md:1: - ship it" in out


def whole_tour(out: List[str], tmp) -> None:
    assert out[0] == "- ship it"
    assert out[1] == "4096"
    assert "src/app.py:1: print('hello')" in out
    assert "notes/todo.md:1: - ship it" in out
    assert "FILE src/app.py 15" in out
    assert any(re.fullmatch(r"VERSION_MISMATCH notes/todo.md \d+", line) for line in out)
    assert "NOT_FOUND FILE_NOT_FOUND missing.txt" in out
    assert "CREATED READY" in out
    assert out[-1] == "True"
    assert (tmp / "workspace-copy" / "notes" / "todo.md").read_text() == "- ship it\n"
    assert (tmp / "workspace-copy" / "data" / "blob.bin").stat().st_size == 1024 * 1024


#: What a block must print beyond running cleanly, by (file, heading).
EXPECTED: Dict[Tuple[str, str], Callable[[List[str], object], None]] = {
    ("README.md", "From Python"): short_tour,
    ("docs/FACES.md", "From Python"): whole_tour,
}


def test_the_docs_have_python_blocks() -> None:
    found = {(b.file, b.heading) for b in python_blocks()}
    # Each block with expectations is still there, so they cannot go stale.
    assert set(EXPECTED) <= found, f"blocks with expectations not found: {set(EXPECTED) - found}"


@pytest.mark.parametrize("block", python_blocks(), ids=lambda b: b.name)
def test_python_block_runs_as_written(block: Block, server: Server, tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", block.code.replace(DOCS_ADDRESS, server.address)],
        cwd=tmp_path,
        env=dict(os.environ, WSFS_SERVER=server.url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    missing = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", done.stderr)
    if done.returncode != 0 and missing and not missing.group(1).startswith("wsfs"):
        if os.environ.get("WSFS_REQUIRE_SEED_CLIENTS") == "1":
            pytest.fail(f"{block.name} needs '{missing.group(1)}', which is not installed")
        pytest.skip(f"{block.name} needs '{missing.group(1)}' (not installed here)")
    assert done.returncode == 0, f"{block.name} failed:\n{done.stderr}"
    check = EXPECTED.get((block.file, block.heading))
    if check:
        check(done.stdout.splitlines(), tmp_path)
