"""The demo's checks (bench/demo/report.py's guarantees) on a shared run whose containers lost
the store: the failed check says whether the store raised a fault or the machine was too busy.

Runs are built from recorded calls and container reports, as tests/demo/test_summary.py
does: no demo runs here.
"""

from __future__ import annotations

from dataclasses import replace

from bench.demo.container import Call, ContainerReport
from bench.demo.report import Run, guarantees
from bench.demo.scenario import SHORT
from bench.demo.summary import CHARGED, RunRecord, summarize

OPTIONS = replace(SHORT, store="memory")
TITLE = "shared breaker (MemoryStore)"


def shared_run(*reports: ContainerReport) -> Run:
    """A shared run of two containers, each charging one payment, that reported ``reports``."""
    calls = [Call(n, 0.1 * n, 0.1 * n + 0.01, CHARGED, "closed", 1, ()) for n in range(2)]
    record = RunRecord(
        "shared", TITLE, "a store", True, 2, (1.0, 2.0), calls=calls, reports=list(reports)
    )
    return Run(record, summarize(record))


def lost(
    number: int, faults: dict[str, int] | None = None, timeouts: dict[str, int] | None = None
) -> ContainerReport:
    """A container that lost the store once (one store error) and ran on local state, its
    store having raised ``faults`` and ``timeouts`` (by error name)."""
    return ContainerReport(
        number, 10, 1, 1, store_faults=faults or {}, store_timeouts=timeouts or {}
    )


def failed_checks(run: Run) -> list[str]:
    return [sentence for held, sentence in guarantees(OPTIONS, [run]) if held is False]


def test_an_error_that_is_no_timeout_fails_the_demo_as_a_fault_not_as_load() -> None:
    # GIVEN two containers whose store raised TypeError (a fault), one also a timeout
    run = shared_run(
        lost(0, faults={"TypeError": 1}),
        lost(1, faults={"TypeError": 1}, timeouts={"TimeoutError": 1}),
    )

    # THEN the demo fails, naming the fault and how often, and blames no load
    [check] = [sentence for sentence in failed_checks(run) if "lost the store" in sentence]
    assert check == (
        "2 containers lost the store and ran on local state (2 times, 2 store errors) in the "
        f"{TITLE} run, with a 10 s store deadline: the store raised TypeError (2 times): a "
        "fault, not the machine's load; see containers.log"
    )
    assert "too busy" not in check


def test_missed_deadlines_and_timeouts_fail_the_demo_as_a_machine_too_busy() -> None:
    # GIVEN a container that missed its store deadline (the store raised nothing), and one
    # whose store timed out twice
    run = shared_run(lost(0), lost(1, timeouts={"ReadTimeoutError": 2}))

    # THEN the demo fails, blaming the machine's load, and says what timed out
    [check] = [sentence for sentence in failed_checks(run) if "lost the store" in sentence]
    assert check.endswith(
        "with a 10 s store deadline: the machine is too busy "
        "(the store timed out: ReadTimeoutError (2 times))"
    )
    assert "fault" not in check
    # AND with deadlines missed alone, it says the machine is too busy, and no more
    [alone] = [s for s in failed_checks(shared_run(lost(0))) if "lost the store" in s]
    assert alone.endswith("with a 10 s store deadline: the machine is too busy")
