"""The README and the documentation site: short README with the two commands, links that
resolve, a command-line reference that cannot drift from the argparse parsers, every page in
the nav. `nox -s docs` builds the site strictly (CI: `nox -s ci` queues `nox -s docs --
--check`); these checks need no mkdocs, so they run in every pytest run."""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.cli import reference
from conformance.cli.app import build_parser
from conformance.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
MAIN_JOB = "python3 -m pip install nox && python3 -m nox -s conformance"
TESTS = "python3 -m pip install nox && python3 -m nox -s ci"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.MULTILINE)


def slug(heading: str) -> str:
    """The anchor Python-Markdown's toc gives a heading (its default slugify)."""
    text = re.sub(r"[`*]", "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+?)\s*$", text, re.M)}


def links(page: Path) -> Iterator[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    for match in LINK.finditer(text):
        if not re.match(r"[a-z]+:", match.group(1)):  # http:, mailto: are not ours
            yield match.group(1)


def nav_pages() -> list[str]:
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def walk(node: object) -> Iterator[str]:
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from walk(value)

    return list(walk(config["nav"]))


# -- the README ------------------------------------------------------------------------------

def test_the_readme_stays_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 170, f"README.md has {len(lines)} lines (at most 170): move to docs/"


def test_the_readme_keeps_the_two_commands_and_ci_runs_the_second() -> None:
    text = README.read_text(encoding="utf-8")
    for command in (MAIN_JOB, TESTS):
        assert f"```bash\n{command}\n```" in text, f"README lost its command: {command}"
    assert "python3 -m nox -s ci" in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    tree = ast.parse((REPO_ROOT / "noxfile.py").read_text(encoding="utf-8"))
    sessions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)
                and any("session" in ast.unparse(d) for d in node.decorator_list)}
    assert {"conformance", "ci", "docs"} <= sessions, sessions


@pytest.mark.parametrize("page", [README, *sorted(DOCS.rglob("*.md"))],
                         ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_links_resolve(page: Path) -> None:
    """Relative links reach a file, and an anchor a heading of it (the README on GitHub; the
    strict build checks the site's own links again, with mkdocs' own rules)."""
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{page.relative_to(REPO_ROOT)}: {broken}"


# -- the site --------------------------------------------------------------------------------

def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    listed = nav_pages()
    present = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(listed) == present, (
        f"not in mkdocs.yml's nav: {sorted(set(present) - set(listed))}; "
        f"in the nav but missing: {sorted(set(listed) - set(present))}")


def test_included_files_and_sections_exist() -> None:
    """`--8<-- "FILE:SECTION"` includes a part of a file kept next to its code (the README's
    layout on the home page): dropping the file or its section markers breaks the site."""
    for page in DOCS.rglob("*.md"):
        for spec in SNIPPET.findall(page.read_text(encoding="utf-8")):
            name, _, section = spec.partition(":")
            source = REPO_ROOT / name
            assert source.is_file(), f"{page.name} includes {name}, which is gone"
            if section and not section[0].isdigit():
                text = source.read_text(encoding="utf-8")
                for edge in ("start", "end"):
                    assert f"--8<-- [{edge}:{section}]" in text, (
                        f"{page.name} includes section {section!r} of {name}: marker gone")


def test_the_readme_tables_are_named_in_the_docs() -> None:
    """The coverage table and the release table left the README: say where they went."""
    assert "(the coverage table)" in (DOCS / "coverage.md").read_text(encoding="utf-8")
    assert "(the coverage tables)" in (DOCS / "gate.md").read_text(encoding="utf-8")
    assert "(the release table)" in (DOCS / "systems.md").read_text(encoding="utf-8")


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed here (nox -s docs)")
    pytest.importorskip("material", reason="the docs extra is not installed here (nox -s docs)")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=REPO_ROOT, capture_output=True,
                          text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "cli" / "conform" / "index.html").is_file()


# -- the command-line reference --------------------------------------------------------------

def test_every_subcommand_has_a_page_and_no_page_is_stale() -> None:
    found = reference.problems()
    assert not found, "\n".join([*found, f"run `{reference.REGENERATE}` and commit docs/cli/"])
    names = set(reference.subcommands(build_parser()))
    assert {f"{name}.md" for name in names} | {"index.md"} == set(reference.pages())
    assert set(reference.owners()) == names, "a subcommand no SUBCOMMAND_MODULES entry registers"


def every_parser(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for child in reference.subcommands(parser).values():
        yield from every_parser(child)


def test_a_page_names_every_option_and_nested_subcommand() -> None:
    """The generator leaves nothing of a parser out (a new kind of argument, a third level)."""
    pages = reference.pages()
    for name, command in reference.subcommands(build_parser()).items():
        page = pages[f"{name}.md"]
        for parser in every_parser(command):
            assert f"# {parser.prog}\n" in page, f"{name}.md: no section for {parser.prog}"
            for action in parser._actions:
                for option in action.option_strings:
                    if option not in ("-h", "--help"):
                        assert f"`{option}" in page or f", {option}" in page, (
                            f"{name}.md: {parser.prog} {option} missing")


def test_the_check_catches_a_new_subcommand_and_a_changed_option(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted drift: the check must fail on it, and writing must repair it."""
    assert reference.write(tmp_path)  # a fresh directory: every page written
    assert reference.problems(tmp_path) == []

    def drifted() -> argparse.ArgumentParser:
        parser = build_parser()
        for action in parser._actions:
            if isinstance(action, reference.SubParsers):
                action.add_parser("planted", help="a subcommand without a page")
                action.choices["conform"].add_argument("--planted", help="new option")
        return parser

    monkeypatch.setattr(reference, "build_parser", drifted)
    found = reference.problems(tmp_path)
    assert any("planted.md: missing" in line for line in found), found
    assert any("conform.md: stale" in line for line in found), found
    assert sorted(reference.write(tmp_path)) == ["conform.md", "index.md", "planted.md"]
    monkeypatch.undo()
    assert reference.write(tmp_path) == ["conform.md", "index.md", "planted.md"]
    assert not (tmp_path / "planted.md").exists(), "a gone subcommand's page is removed"
    assert reference.problems(tmp_path) == []


def test_markdown_in_help_text_is_escaped_outside_code_spans() -> None:
    assert reference.escape("'scheduler.*' or *.jsonl `a*b` [x]") == (
        "'scheduler.\\*' or \\*.jsonl `a*b` \\[x\\]")
    assert reference.escape("scheduled_new, _x_") == "scheduled_new, \\_x\\_"
