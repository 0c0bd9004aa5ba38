"""docs/abuse.md cites a test for each abuse case (``integration/test_x.py::test_y``, paths under
``tests/``): each cited file must exist and define that test, so a renamed or deleted test cannot
leave the table pointing at nothing."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITED = re.compile(r"\b((?:unit|integration|e2e)/test_\w+\.py)::(test_\w+)")


def test_every_test_the_abuse_tables_cite_exists():
    text = (ROOT / "docs" / "abuse.md").read_text()
    cited = set(CITED.findall(text))
    assert len(cited) > 50
    missing = []
    for path, name in sorted(cited):
        f = ROOT / "tests" / path
        if not f.exists() or not re.search(rf"^(async )?def {name}\(", f.read_text(), re.M):
            missing.append(f"{path}::{name}")
    assert not missing, missing
