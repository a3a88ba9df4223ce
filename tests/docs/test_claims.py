"""Claims in the docs that name something the code defines: they must name it all, and truly.

Each test reads the sentence's list from the doc and the same list from the code (or the
template), so adding a setting, a permission or an option without the doc fails here.
"""

from __future__ import annotations

import re

from devtools.servers import REPO_ROOT
from fleetbreaker import tuning

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"


def _options(text: str) -> set[str]:
    return set(re.findall(r"`(--[a-z][a-z-]*)", text))


def test_operations_lists_every_tunable_setting() -> None:
    # GIVEN the sentence that starts "Tunable:" in operations.md
    text = (DOCS / "operations.md").read_text()
    sentence = text[text.index("Tunable: ") :].split(". ", 1)[0]

    # THEN it names exactly the CLI's tune options (generated from tuning.TUNABLE)
    expected = {"--" + name.replace("_", "-") for name in tuning.TUNABLE}
    assert _options(sentence) - {"--clear"} == expected


def _access_string() -> set[str]:
    template = (REPO_ROOT / "template.yaml").read_text()
    block = template[template.index("AccessString: >-") :].split("\n\n", 1)[0]
    return set(re.findall(r"(\+[a-z|]+)", block))


def test_the_redis_permission_lists_match_the_templates_user() -> None:
    # GIVEN the commands template.yaml's BreakerCacheUser may run
    allowed = _access_string()
    assert "+ping" in allowed

    # THEN operations.md's and stores.md's lists name exactly those
    for doc, marker in (
        ("operations.md", "Redis: a user"),
        ("stores.md", "The commands the store"),
    ):
        text = (DOCS / doc).read_text()
        paragraph = text[text.index(marker) :].split("\n\n", 1)[0]
        assert set(re.findall(r"(\+[a-z|]+)", paragraph)) == allowed, doc


def test_stores_says_list_scans() -> None:
    text = (DOCS / "stores.md").read_text()
    assert "`+scan` for listing breakers (`fleetbreaker list`)" in text


def test_the_attach_snippet_marker_names_the_test_that_validates_it() -> None:
    # GIVEN the README's marker naming the test of its attach snippet
    marker = re.search(r"<!-- attach-snippet: (\S+) validates", README.read_text())
    assert marker is not None
    path = REPO_ROOT / marker.group(1)

    # THEN that file exists and reads the snippet through the marker
    assert path.is_file(), path
    assert "attach-snippet" in path.read_text()


def test_demo_md_lists_every_demo_option() -> None:
    # GIVEN the options `make demo ARGS='--help'` lists
    from bench.demo.__main__ import parser

    options = {o for action in parser()._actions for o in action.option_strings}
    options -= {"-h", "--help"}

    # THEN docs/demo.md's Options section names each one
    text = (DOCS / "demo.md").read_text()
    section = text[text.index("## Options") :].split("\n## ", 1)[0]
    assert options <= _options(section), options - _options(section)
