"""Every relative link in README.md and docs/*.md resolves: the file exists, and a ``#fragment`` names a
heading of the target (GitHub's anchor rule). Links that leave the repository (``../shared/API.md``,
the contract kept next to the checkout) and absolute URLs are not checked."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to dashes.

    >>> slug("SQS-compatible endpoint (`POST /`, `POST /{account}/{queue}`)")
    'sqs-compatible-endpoint-post--post-accountqueue'
    """
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def links(page: Path):
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        yield target


def test_pages_exist():
    assert (ROOT / "README.md").exists() and len(PAGES) > 3


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path):
    broken = []
    for target in links(page):
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        try:
            dest.relative_to(ROOT)
        except ValueError:
            continue  # outside the checkout (e.g. ../shared/API.md)
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{frag}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_a_broken_link_is_caught(tmp_path):
    """The check itself can fail: a missing file and a missing anchor are both reported."""
    page = tmp_path / "p.md"
    page.write_text("# Title\n[a](p.md#title) [b](p.md#nope) [c](missing.md)\n")
    assert "title" in anchors(page)
    assert [t for t in links(page) if t.partition("#")[2] not in anchors(page) or "missing" in t] == [
        "p.md#nope", "missing.md"]
