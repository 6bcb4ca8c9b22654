"""The README and the documentation site: links that resolve, a synopsis and a CLI reference that
match the parser, a site build that fails on a broken link and lists every results page."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import mkdocs_hooks  # noqa: E402

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lstrip("#").strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def markdown_links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return LINK.findall(text)


def test_readme_links_resolve():
    readme = ROOT / "README.md"
    links = markdown_links(readme)
    assert len(links) >= 10, links  # the table of documentation pages at least
    broken = []
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue  # http(s), mailto: not followed offline
        target, _, anchor = link.partition("#")
        path = (readme.parent / target) if target else readme
        if not path.exists():
            broken.append(f"{link}: no such file")
            continue
        if anchor and path.suffix == ".md":
            slugs = {
                github_slug(line)
                for line in path.read_text(encoding="utf-8").splitlines()
                if line.startswith("#")
            }
            if anchor not in slugs:
                broken.append(f"{link}: no heading with that anchor")
    assert not broken, broken


def test_readme_links_every_docs_page():
    """The README's table of documentation pages names every page of the site's nav."""
    linked = {link.partition("#")[0] for link in markdown_links(ROOT / "README.md")}
    pages = {
        f"docs/{p.relative_to(ROOT / 'docs').as_posix()}"
        for p in (ROOT / "docs").glob("*.md")
        if p.name != "index.md"
    }
    assert pages - linked == set()


# -- the README's synopsis against the parser -------------------------------------------------


def parsers() -> dict[str, argparse.ArgumentParser]:
    """ "hfsweep NAME" (and "hfsweep catalog show", ...) -> its parser, as hfsweep builds it."""
    out = {}
    for name, parser in mkdocs_hooks.command_parsers()[1:]:
        out[name] = parser
        for action, sub in mkdocs_hooks._subparsers(parser).items():
            out[f"{name} {action}"] = sub
    return out


def parser_options(parser: argparse.ArgumentParser) -> set[str]:
    return {
        s for a in parser._actions for s in a.option_strings if s.startswith("--") and s != "--help"
    }


def synopsis() -> dict[str, str]:
    """The README's command synopsis: "hfsweep NAME" -> the text of its entry."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(
        r"\[start:synopsis\] -->\s*```text\n(.*?)```\s*<!-- --8<-- \[end:synopsis\]", text, re.S
    )
    assert match, "README.md: no synopsis between its --8<-- [start:synopsis] and [end:synopsis]"
    names = sorted(parsers(), key=len, reverse=True)
    entries: dict[str, str] = {}
    current = None
    for line in match.group(1).splitlines():
        if line.startswith("hfsweep --"):  # the top-level options (--version)
            current = None
            continue
        if line.startswith("hfsweep "):
            current = next((n for n in names if line.startswith(n + " ") or line == n), None)
            assert current, f"README synopsis names no command: {line!r}"
            entries[current] = ""
        if current:
            entries[current] += line + "\n"
    return entries


def test_readme_synopsis_matches_the_parser():
    entries = synopsis()
    all_parsers = parsers()
    commands = {n for n in all_parsers if not mkdocs_hooks._subparsers(all_parsers[n])}
    assert commands - set(entries) == set(), "commands missing from the README's synopsis"
    for name, text in entries.items():
        listed = set(OPTION.findall(text))
        if "every option of run" in text:
            listed |= parser_options(all_parsers["hfsweep run"])
        expected = parser_options(all_parsers[name])
        assert listed - expected == set(), f"{name}: the README lists options it does not take"
        assert expected - listed == set(), f"{name}: options missing from the README's synopsis"


# -- the CLI reference page -------------------------------------------------------------------


def test_cli_reference_renders_every_command_and_option():
    text = mkdocs_hooks.cli_reference()
    sections = re.split(r"^##+ ", text, flags=re.M)
    by_name = {s.split("\n", 1)[0].strip("` "): s for s in sections if s.strip()}
    for name, parser in parsers().items():
        assert name in by_name, f"no section for {name}"
        assert f"$ {name} --help" in by_name[name]
        missing = {o for o in parser_options(parser) if o not in by_name[name]}
        assert not missing, f"{name}: {missing}"
    assert "usage: hfsweep run " in text


# -- the site build ---------------------------------------------------------------------------


def site_copy(tmp_path: Path) -> Path:
    """A copy of what the site is built from (and of the files its pages include), to break."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs")
    included = {
        name.split(":")[0]
        for page in (ROOT / "docs").rglob("*.md")
        for name in re.findall(r'^--8<-- "([^"]+)"', page.read_text(encoding="utf-8"), re.M)
    }
    for name in {"mkdocs.yml", "scripts/mkdocs_hooks.py", *included}:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, root / name)
    return root


def build(root: Path) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mkdocs")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_site_build_fails_on_a_broken_link_and_a_missing_anchor(tmp_path):
    root = site_copy(tmp_path)
    page = root / "docs" / "getting-started.md"
    page.write_text(
        page.read_text(encoding="utf-8")
        + "\nSee [this](no-such-page.md) and [that](cli.md#no-such-section).\n",
        encoding="utf-8",
    )
    done = build(root)
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr
    assert "no-such-section" in done.stderr


def test_site_build_fails_on_a_page_left_out_of_the_nav(tmp_path):
    root = site_copy(tmp_path)
    (root / "docs" / "orphan.md").write_text("# Orphan\n", encoding="utf-8")
    done = build(root)
    assert done.returncode != 0
    assert "orphan.md" in done.stderr


def test_site_lists_a_new_results_page_and_fetches_nothing(tmp_path):
    root = site_copy(tmp_path)
    (root / "docs" / "results" / "2099-01-01-example.md").write_text(
        "# 2099-01-01: an example measurement\n\nCommand, commit and machine.\n",
        encoding="utf-8",
    )
    done = build(root)
    assert done.returncode == 0, done.stderr
    site = root / "site"
    index = (site / "results" / "index.html").read_text(encoding="utf-8")
    assert 'href="2099-01-01-example.html"' in index
    assert "an example measurement" in index
    fetched = [
        (page.name, url)
        for page in site.rglob("*.html")
        for url in re.findall(
            r"<(?:script|link|img)[^>]+(?:src|href)=\"(https?://[^\"]+)",
            page.read_text(encoding="utf-8"),
        )
    ]
    assert fetched == []


def test_every_results_page_says_how_it_was_measured():
    pages = sorted((ROOT / "docs" / "results").glob("[0-9]*.md"))
    assert pages
    for page in pages:
        assert re.match(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md$", page.name), page.name
        text = page.read_text(encoding="utf-8").lower()
        assert "```" in text, f"{page.name}: no command"
        assert "commit" in text, f"{page.name}: no commit"
        assert "machine" in text, f"{page.name}: no machine"


def test_the_store_page_lists_every_table():
    """docs/store.md's table of tables names exactly the tables of `ground/schema.py`."""
    from ground.schema import TABLES

    text = (ROOT / "docs" / "store.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", text, flags=re.M))
    assert listed == set(TABLES)


# -- the README's samples against what the demo printed ----------------------------------------


def test_the_readme_report_sample_has_the_recorded_figures() -> None:
    """The README's report sample carries exactly the figures `scripts/readme_samples.py`
    recorded from the demo's store (`docs/results/readme-samples.json`): a sample edited by
    hand, or left behind when the summary was regenerated, fails here. That the summary is what
    a fresh demo prints is `python scripts/readme_samples.py --store S --check`'s to say (it
    needs a 50-model sweep, too slow for the suite)."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location(
        "readme_samples", ROOT / "scripts" / "readme_samples.py"
    )
    assert spec is not None and spec.loader is not None
    samples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(samples)
    recorded = json.loads((ROOT / "docs" / "results" / "readme-samples.json").read_text())
    in_readme = samples.figures(samples.readme_block("report"))
    differ = {
        k: (recorded["figures"].get(k), in_readme.get(k))
        for k in set(recorded["figures"]) | set(in_readme)
        if recorded["figures"].get(k) != in_readme.get(k)
    }
    assert in_readme and not differ, f"README figures differ from the recorded ones: {differ}"
