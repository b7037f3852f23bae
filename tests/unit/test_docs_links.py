"""The docs' links: every relative link and anchor in README.md and docs/ resolves inside the
repository, and none leaves it (a fresh clone has nothing beside it)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "examples").rglob("*.md")]
)

_FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.DOTALL | re.MULTILINE)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
_EXPLICIT_ANCHOR = re.compile(r'<a\s+(?:name|id)="([^"]+)"')


def prose(text: str) -> str:
    """The page without its code: fenced blocks and code spans hold examples, not links."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text())
    found: set[str] = set(_EXPLICIT_ANCHOR.findall(text))
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(text):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    return _LINK.findall(prose(path.read_text()))


def test_pages_found() -> None:
    assert ROOT / "README.md" in PAGES
    assert len(PAGES) > 10


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves_inside_the_repository(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            if not target.startswith(("mailto:", "http://127.0.0.1", "http://localhost")):
                broken.append(f"{target}: leaves the repository")
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / unquote(file_part)).resolve() if file_part else page
        if not dest.is_relative_to(ROOT):
            broken.append(f"{target}: outside the repository")
        elif not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and unquote(anchor) not in anchors(dest):
            broken.append(f"{target}: no such anchor in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_checker_sees_a_broken_anchor_and_a_link_out(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A title\n\n[ok](#a-title) [bad](#nope) [out](https://example.com)\n")
    assert links(page) == ["#a-title", "#nope", "https://example.com"]
    assert anchors(page) == {"a-title"}
    assert slug("`GET /jobs/{id}` — one task") == "get-jobsid--one-task"


def test_pages_stay_small_enough_to_read() -> None:
    """The README is the front door (10 KB); performance.md one table and its method (15 KB); no
    page over 25 KB (split it by task instead)."""
    limits = {ROOT / "README.md": 10_240, ROOT / "docs" / "performance.md": 15_360}
    over = [
        f"{page.relative_to(ROOT)}: {size} bytes"
        for page in PAGES
        if (size := len(page.read_bytes())) > limits.get(page, 25_600)
    ]
    assert not over, over
