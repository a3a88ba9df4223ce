"""The README's first screen sells, and every measured number it quotes is rendered.

Its first 60 lines hold the pitch (with the measured comparison and the link to the migration
guide), one copyable example and the two commands, demo first. Below them, a size or a
duration the README quotes is a figure rendered from bench/results (`make figures`), or one of
the few settings named here: never a measurement typed by hand, which drifts.
"""

from __future__ import annotations

import re

import pytest

from bench import figures, layer_sizes
from devtools.servers import REPO_ROOT
from tests.docs.blocks import FENCE

README = REPO_ROOT / "README.md"
FIRST_SCREEN = 60
MIGRATION_GUIDE = "docs/migrating-from-powertools.md"


def first_lines(text: str, count: int = FIRST_SCREEN) -> str:
    return "".join(text.splitlines(keepends=True)[:count])


def fenced(text: str, *languages: str) -> list[str]:
    """The fenced blocks of ``text`` in these languages, whole (a block cut off is none)."""
    return [m.group(2) for m in FENCE.finditer(text) if m.group(1) in languages]


def the_two_commands(text: str) -> list[str]:
    """The `make` commands of the first shell block, in order."""
    shells = fenced(text, "bash", "console", "sh")
    if not shells:
        return []
    return re.findall(r"^\$? ?make ([a-z-]+)", shells[0], re.M)


def test_the_first_screen_has_a_copyable_breaker() -> None:
    # GIVEN the README's first 60 lines
    screen = first_lines(README.read_text())
    # THEN a whole Python block in them builds a CircuitBreaker (tests/docs/test_examples.py
    # runs it as written)
    assert any("CircuitBreaker(" in block for block in fenced(screen, "python"))


def test_the_first_screen_gives_the_demo_then_the_tests() -> None:
    # GIVEN the README's first 60 lines THEN its first commands are `make demo`, then `make test`
    assert the_two_commands(first_lines(README.read_text())) == ["demo", "test"]


def test_the_first_screen_links_the_migration_guide() -> None:
    assert f"]({MIGRATION_GUIDE})" in first_lines(README.read_text())


def test_the_first_screen_compares_with_powertools_in_rendered_figures() -> None:
    # GIVEN the README's first 60 lines
    screen = first_lines(README.read_text())
    # THEN it quotes the side-by-side measurement, rendered from bench/results
    quoted = {key for key, _ in figures.regions(screen)}
    assert {"fvp.trip.fleetbreaker", "fvp.trip.powertools"} <= quoted
    assert "Powertools" in screen


@pytest.mark.parametrize(
    ("readme", "problem"),
    [
        ("# x\n\n" + "pitch\n" * 70 + "```python\nCircuitBreaker('a')\n```\n", "breaker"),
        ("# x\n\n```bash\nmake test\nmake demo\n```\n", "commands"),
        ("# x\n\n```bash\nmake demo\nmake test-quick\nmake test\n```\n", "commands"),
        ("# x\n\n" + "pitch\n" * 70 + "[guide](docs/migrating-from-powertools.md)\n", "link"),
    ],
    ids=["example-too-late", "tests-before-demo", "a-third-command", "link-too-late"],
)
def test_each_first_screen_check_fails_on_a_readme_that_breaks_it(
    readme: str, problem: str
) -> None:
    screen = first_lines(readme)
    found = {
        "breaker": any("CircuitBreaker(" in block for block in fenced(screen, "python")),
        "commands": the_two_commands(screen) == ["demo", "test"],
        "link": f"]({MIGRATION_GUIDE})" in screen,
    }
    assert found[problem] is False


# A size or a duration in prose: "23 s", "7 min 0 s", "13.4 MB", "0.6 µs", "300 ms".
QUANTITY = re.compile(r"\d[\d.,]*\s?(?:µs|ms|s|min|minutes?|seconds?|hours?|[kMG]B)\b")
# The durations the README may state outside a figure: settings and the benchmark's own
# conditions, not measurements (each says which).
SETTINGS = {
    "1 s": "store_deadline_seconds' default; the assumed clock skew; the benchmark's cache_ttl",
    "5 s": "the store's rest after a failure",
    "3 s": "the healthy-calls benchmark's duration",
    "300 ms": "the benchmarks' half-open window",
}


def quantities_outside_figures(text: str) -> list[str]:
    """Sizes and durations in prose, outside rendered figures, code blocks and inline code."""
    text = figures.MARKER.sub("", text)
    text = FENCE.sub("", text)
    text = re.sub(r"`[^`\n]*`", "", text)
    return QUANTITY.findall(text)


def test_every_size_and_duration_the_readme_quotes_is_rendered_or_a_setting() -> None:
    # GIVEN the README without its rendered figures
    typed = quantities_outside_figures(README.read_text())
    # THEN what is left is a setting, never a measured size or time typed by hand
    assert set(typed) <= set(SETTINGS), set(typed) - set(SETTINGS)


def test_a_timing_typed_by_hand_is_found() -> None:
    # GIVEN the lines the issue found on the README's first screen
    text = (
        "make test-quick  # no server: 23 s\n"
        "its tests took 7 min 0 s and 7 min 58 s on 2 idle cores\n"
        "13.4–14.0 MB and 1.2–1.3 MB unzipped\n"
        "<!-- figure: layers.summary -->13.54 MB<!-- /figure --> and `cache_ttl=0.5 s`\n"
    )
    # THEN each typed figure is found, and the rendered one and the inline code are not
    assert quantities_outside_figures(text) == [
        *("23 s", "7 min", "0 s", "7 min", "58 s", "14.0 MB", "1.3 MB")
    ]


def test_the_readme_quotes_the_layer_sizes_as_make_build_prints_them() -> None:
    # GIVEN the layer sizes the README quotes, rendered from bench/results/layer_sizes.json
    readme = README.read_text()
    (quoted,) = [text for key, text in figures.regions(readme) if key == "layers.summary"]
    # THEN each number is one bench/layer_sizes.py (and so `make build`) prints for that file
    doc = figures.load(figures.RESULTS / figures.LAYERS)
    printed = "\n".join(layer_sizes.size_lines(doc["layers"]))
    numbers = re.findall(r"\d+\.\d+", quoted)
    assert len(numbers) == 4, quoted
    assert all(f" {number} MB" in printed for number in numbers), (quoted, printed)
