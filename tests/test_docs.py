"""The docs site (`docs/`, `mkdocs.yml`) and the README as its landing page.

- The README stays a landing page: at most 200 lines, the two commands on its first screen,
  links into the docs that lead to pages that exist.
- Every ```python block of the README and the docs pages compiles (top-level `await`
  allowed: the blocks are written as if in an async REPL), and every name it imports exists.
  A block that needs nothing from outside is executed: one that binds every name it uses,
  awaits nothing (so needs no server) and holds no `...` placeholder.
- `mkdocs build --strict`, exactly as `docs/contributing.md` shows it, builds the site (a
  broken link or anchor, a page left out of the nav or an unknown reference fails it), and
  the API reference it generates documents every name of `towline.__all__` and of
  `towline.capabilities.__all__` (read from the site's `objects.inv`).

(`tests/test_readme_commands.py` runs the pages' ```sh commands.)
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
import sys
import types
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
from readme import README, REPO, cli_env, manual_pages, readme
from test_readme_commands import QUICKSTART, TESTS

import towline
import towline.capabilities

FIRST_SCREEN = 45
"""Lines a reader sees before scrolling: the two commands must be there."""


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    source: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def _blocks() -> list[Block]:
    found: list[Block] = []
    for page in manual_pages():
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE):
            found.append(Block(page, text.count("\n", 0, match.start()) + 2, match.group(1)))
    return found


BLOCKS = _blocks()


def _tree(block: Block) -> ast.Module:
    return ast.parse(block.source, block.name, feature_version=(3, 11),
                     type_comments=False)


def _compiled(block: Block) -> types.CodeType:
    return compile(block.source, block.name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                   dont_inherit=True)


def test_the_readme_is_a_landing_page() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; guides belong in docs/"
    first = "\n".join(lines[:FIRST_SCREEN])
    for command in (QUICKSTART, TESTS):
        assert f"```sh\n{command}\n```" in first, f"not on the README's first screen: {command}"
    targets = re.findall(r"\]\((docs/[^)#\s]+)(?:#[^)]*)?\)", text)
    for page in ("quickstart.md", "concepts.md", "time-travel.md", "fleet.md", "production.md",
                 "reference/index.md", "images/ui-timeline.png"):
        assert f"docs/{page}" in targets, f"the README does not link docs/{page}"
    missing = [t for t in targets if not (REPO / t).is_file()]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_the_docs_show_python() -> None:
    pages = {b.page.name for b in BLOCKS}
    assert len(BLOCKS) >= 30 and {"README.md", "capabilities.md", "models.md"} <= pages


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_every_python_block_compiles_and_its_imports_exist(block: Block) -> None:
    _compiled(block)
    for node in ast.walk(_tree(block)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom):
            assert node.module and not node.level, f"{block.name}: a relative import"
            module = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(module, alias.name):  # a submodule not imported yet
                    importlib.import_module(f"{node.module}.{alias.name}")


def _bound(tree: ast.Module) -> set[str]:
    """Every name the block binds anywhere (assignments, imports, defs, parameters, ...)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _self_contained(block: Block) -> bool:
    """Binds every name it uses, awaits nothing at the top (no server), has no `...`."""
    tree = _tree(block)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    if used - _bound(tree) - set(dir(builtins)):
        return False
    if any(isinstance(n, ast.Constant) and n.value is Ellipsis for n in ast.walk(tree)):
        return False
    return not _compiled(block).co_flags & 0x80  # CO_COROUTINE: a top-level await


RUNNABLE = [b for b in BLOCKS if _self_contained(b)]


def test_enough_blocks_run() -> None:
    # What the rule executes, so it cannot quietly stop executing anything.
    assert len(RUNNABLE) >= 12, [b.name for b in RUNNABLE]
    assert any(b.page == README for b in RUNNABLE), "the README's agent runs"


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.name)
def test_a_self_contained_block_runs(block: Block, monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("docs_block")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look it up
    monkeypatch.syspath_prepend(str(REPO))  # `examples.*`
    exec(_compiled(block), module.__dict__)  # noqa: S102 - running the docs is the test


def _inventory(site: Path) -> set[str]:
    """The object names of a Sphinx inventory (`objects.inv`, as mkdocstrings writes it)."""
    data = (site / "objects.inv").read_bytes()
    header, _, body = data.partition(b"zlib.\n")
    assert header.startswith(b"# Sphinx inventory version 2"), header[:60]
    return {line.split(" ", 1)[0] for line in zlib.decompress(body).decode().splitlines()}


async def test_the_site_builds_strictly_and_documents_the_public_api() -> None:
    done = await readme("mkdocs build --strict", env=cli_env(extra={"NO_MKDOCS_2_WARNING": "1"}),
                        cwd=REPO, timeout=300)
    assert done.code == 0, done.err[-3000:]
    site = REPO / "site"
    documented = _inventory(site)
    missing = [n for n in towline.__all__ if f"towline.{n}" not in documented]
    missing += [f"capabilities.{n}" for n in towline.capabilities.__all__
                if f"towline.capabilities.{n}" not in documented]
    assert not missing, f"names the API reference does not document: {missing}"
    concepts = (site / "concepts" / "index.html").read_text(encoding="utf-8")
    assert '<pre class="mermaid"><code>sequenceDiagram' in concepts  # rendered by mermaid.js
    for page in ("time-travel", "fleet", "production", "reference/towline"):
        assert (site / page / "index.html").is_file(), page


def test_the_screenshots_are_the_scripts_and_shown() -> None:
    """`scripts/screenshots.py` (too slow to run here: a dev server and a browser, about half a
    minute) answers `--help`, and each picture it writes is a PNG some page shows."""
    import subprocess

    helped = subprocess.run([sys.executable, str(REPO / "scripts" / "screenshots.py"), "--help"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert helped.returncode == 0, helped.stderr
    assert "--out" in helped.stdout and "--chromium" in helped.stdout
    source = (REPO / "scripts" / "screenshots.py").read_text(encoding="utf-8")
    shown = "\n".join(p.read_text(encoding="utf-8") for p in manual_pages())
    names = sorted(set(re.findall(r'"(ui-[a-z-]+\.png)"', source)))
    assert names == ["ui-approval.png", "ui-memo.png", "ui-timeline.png"]
    for name in names:
        assert (REPO / "docs" / "images" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert f"images/{name})" in shown, f"no page shows {name}"
