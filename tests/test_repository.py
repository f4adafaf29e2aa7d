"""The repository as shipped: every relative link in the Markdown pages resolves to a tracked file
(and a heading, where it names one), and no tracked file or package data holds a machine's
absolute path (a development machine's checkout, home or scratch folder)."""

from __future__ import annotations

import lzma
import re
import subprocess
from functools import cache
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("specguard", "specguard_core", "specguard_bench", "specguard_integrations")


@cache
def tracked() -> tuple[str, ...]:
    """The paths git tracks (as `git ls-files` prints them), present in the working tree."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return tuple(p for p in out.decode().split("\0") if p and (ROOT / p).is_file())


# ---- links -------------------------------------------------------------------------------------
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def pages() -> list[str]:
    """README.md and every tracked Markdown page under docs/ and benchmarks/."""
    return [p for p in tracked() if p == "README.md"
            or (p.endswith(".md") and p.startswith(("docs/", "benchmarks/")))]


def links(text: str) -> list[str]:
    """The link targets of a Markdown text, outside code blocks and code spans."""
    prose = CODE_SPAN.sub("", FENCE.sub("", text))
    return INLINE.findall(prose) + REFERENCE.findall(prose)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it: lower case, punctuation dropped, spaces -> '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a Markdown page (a repeated heading's with `-1`, `-2`, ...)."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for heading in re.findall(r"^ {0,3}#{1,6}\s+(.+?)\s*#*\s*$", FENCE.sub("", text), re.M):
        base = slug(heading)
        n = counts.get(base, 0)
        counts[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def resolve(page: str, path: str) -> str:
    """A link's path, relative to the page `page`, as a path from the repository root (`..`
    above the root stays `..`: never a tracked path)."""
    parts: list[str] = []
    for part in (PurePosixPath(page).parent / path).as_posix().split("/"):
        if part == ".." and parts and parts[-1] != "..":
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


def broken_links(root: Path, page: str, files: set[str]) -> list[str]:
    """The links of `page` (a path under `root`) that resolve to no file of `files`, no folder
    holding one, or no heading of the page they name."""
    dirs = {str(parent) for f in files for parent in PurePosixPath(f).parents}
    broken = []
    for target in links((root / page).read_text(encoding="utf-8")):
        if SCHEME.match(target):
            continue  # a URL: not this test's business (no network)
        path, _, fragment = target.partition("#")
        name = resolve(page, path) if path else page
        if name not in files and name not in dirs:
            broken.append(f"{page}: {target} (no tracked file {name})")
        elif fragment and name in files and name.endswith(".md") and \
                fragment not in anchors((root / name).read_text(encoding="utf-8")):
            broken.append(f"{page}: {target} (no heading #{fragment} in {name})")
    return broken


def test_relative_links_in_the_docs_resolve() -> None:
    assert len(pages()) > 20  # README, docs/, benchmarks/: the check sees the pages
    files = set(tracked())
    broken = [b for page in pages() for b in broken_links(ROOT, page, files)]
    assert not broken, "broken links (a removed result folder: benchmarks/results/README.md):\n" \
        + "\n".join(broken)


def test_the_link_check_finds_broken_links(tmp_path: Path) -> None:
    text = ("[ok](docs/api.md) ![gone](results/no-such-run/results.png) [up](../README.md)\n"
            "```\n[in code](nowhere.md)\n```\n`[span](nowhere.md)` [web](https://example.com)\n"
            "[anchor](docs/guarantees.md#no-such-heading) [here](#results) [a folder](docs/)\n"
            "[ok anchor](docs/guarantees.md#bad-input)\n\n## Results\n")
    assert links(text) == ["docs/api.md", "results/no-such-run/results.png", "../README.md",
                           "https://example.com", "docs/guarantees.md#no-such-heading",
                           "#results", "docs/", "docs/guarantees.md#bad-input"]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guarantees.md").write_text("# Guarantees\n\n## Bad input\n")
    (tmp_path / "page.md").write_text(text)
    files = {"page.md", "docs/api.md", "docs/guarantees.md", "README.md"}
    assert broken_links(tmp_path, "page.md", files) == [
        "page.md: results/no-such-run/results.png (no tracked file results/no-such-run/results.png)",
        "page.md: ../README.md (no tracked file ../README.md)",
        "page.md: docs/guarantees.md#no-such-heading (no heading #no-such-heading in "
        "docs/guarantees.md)",
    ]


def test_heading_anchors_follow_github() -> None:
    assert slug("No network, no remote code") == "no-network-no-remote-code"
    assert slug("`specguard serve`: flags") == "specguard-serve-flags"
    assert slug("`tool_choice` and [links](x.md)") == "tool_choice-and-links"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


# ---- machine paths -----------------------------------------------------------------------------
# A development machine's checkout, shared data, home or scratch folder, as an absolute path (a
# user-relative `~/.cache/...` or a path under the repository is fine). The names are spelled out
# in pieces, so this file does not match itself.
MACHINE_PATH = re.compile(r"(?<![\w.~$-])/(?:" + "|".join(
    ["work", "root", "home", "Users", "tmp", "private/var", "var/folders", "mnt/data"]) + r")/"
    r"|\b[A-Z]:(?:\\)+Users(?:\\)+")
# Files that may name one, and why. Keep this short: a path a user must adapt belongs in the docs
# as a placeholder (`$DATA/steps_dev.jsonl`, `~/.cache/specguard`), never as a machine's own.
ALLOWED: dict[str, str] = {}


def package_data() -> list[str]:
    """Every file of the packages but their code (cards, bounds, datasets, markers), tracked or
    not: what a wheel built from this working copy would ship."""
    return sorted(p.relative_to(ROOT).as_posix() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*")
                  if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts)


def text_of(path: Path) -> str | None:
    """A file's text (an `.xz` file's decompressed text); None for a binary file."""
    data = lzma.decompress(path.read_bytes()) if path.suffix == ".xz" else path.read_bytes()
    return None if b"\0" in data else data.decode("utf-8", "replace")


def machine_paths(text: str) -> list[str]:
    """Each line of `text` that holds a machine's absolute path, with its 1-based number."""
    return [f"{n}: {line.strip()[:160]}" for n, line in enumerate(text.splitlines(), 1)
            if MACHINE_PATH.search(line)]


def test_no_machine_path_in_the_tree_or_the_package_data() -> None:
    files = sorted(set(tracked()) | set(package_data()))
    assert "specguard_core/verifiers/qwen2.5-coder-0.5b-instruct.json" in files
    found = [f"{name}:{hit}" for name in files if name not in ALLOWED
             and (text := text_of(ROOT / name)) is not None for hit in machine_paths(text)]
    assert not found, ("absolute machine paths (store paths relative to the repository or the run "
                       "folder; a user's path as a placeholder):\n" + "\n".join(found))


def test_the_path_check_sees_machine_paths_and_spares_the_rest(tmp_path: Path) -> None:
    work, home, scratch = ("/".join(["", d, "x", "y.json"]) for d in ("work", "home", "tmp"))
    text = (f'"out_dir": "{work}"\ndata: `{home}`\n--out {scratch}\n'
            "~/.cache/specguard/models\nbenchmarks/results/tmp/run\n$DATA/steps_dev.jsonl\n"
            "C:" + "\\\\" + "Users" + "\\\\" + "me\n" + "D:" + "\\" + "Users" + "\\" + "me\n")
    assert [hit.split(":")[0] for hit in machine_paths(text)] == ["1", "2", "3", "7", "8"]
    packed = tmp_path / "rows.jsonl.xz"
    packed.write_bytes(lzma.compress(f'{{"out_dir": "{work}"}}\n'.encode()))
    assert machine_paths(text_of(packed) or "") == [f'1: {{"out_dir": "{work}"}}']
    (tmp_path / "plot.png").write_bytes(b"\x89PNG\0" + work.encode())
    assert text_of(tmp_path / "plot.png") is None
