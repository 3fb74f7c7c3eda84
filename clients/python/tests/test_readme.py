"""The repository README's Python example, run exactly as written there."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import REPO, Server


def readme_example() -> str:
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    section = readme.split("\n## From Python\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the README's From Python section has one python block"
    return blocks[0]


def test_readme_example_runs_unchanged(server: Server, tmp_path) -> None:
    code = readme_example()
    env = dict(os.environ, WSFS_SERVER=server.url)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "- ship it"
    assert lines[1] == "4096"
    assert "src/app.py:1: print('hello')" in lines
    assert "notes/todo.md:1: - ship it" in lines
    assert "FILE src/app.py 15" in lines
    assert any(re.fullmatch(r"VERSION_MISMATCH notes/todo.md \d+", line) for line in lines)
    assert "NOT_FOUND FILE_NOT_FOUND missing.txt" in lines
    assert "CREATED READY" in lines
    assert lines[-1] == "True"
    assert (tmp_path / "workspace-copy" / "notes" / "todo.md").read_text() == "- ship it\n"
    assert (tmp_path / "workspace-copy" / "data" / "blob.bin").stat().st_size == 1024 * 1024
