"""The real statemachine/payment.asl.json, executed by moto's Step Functions interpreter.

How the pieces run
------------------
- The definition is the file in the repo with the template's DefinitionSubstitutions applied
  (tests/stepfunctions/conftest.py), created in moto with ``mock_aws`` configured to execute
  state machines (``{"stepfunctions": {"execute_state_machine": True}}``).
- Each Task invokes a real Lambda function created in moto (IAM role, zip of the function's
  ``app.py``, environment). The interpreter calls Lambda's Invoke API through boto3, which
  moto routes to its Lambda backend. That backend would run the code in a Docker container,
  from ``LambdaFunction._invoke_lambda``; :class:`tests.stepfunctions.harness.InProcessLambdas`
  replaces only that method, calling the function's real ``lambda_handler`` in this process
  and returning what the Lambda runtime returns (the result, or the runtime's error payload
  with ``errorType``). So ARN resolution, the function-error header, the ``Lambda.*`` names
  of API errors and the interpreter's error matching in Retry/Catch are all moto's own code.
- The gate's breakers live in a table on moto's standalone server, shared by every execution
  (a fresh table per test), with an injected clock.
- Wait states and Retry back-offs return at once (``waits`` fixture); a Wait moves the
  breaker's clock by its duration unless a test freezes it, so no test sleeps and time in the
  workflow and in the breaker agree.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.stepfunctions.conftest import BREAKER
from tests.stepfunctions.harness import LambdaThrottled, read_event
from tests.support import wait_for

pytestmark = pytest.mark.timeout(120)

PAYMENT = read_event("statemachine-payment.json")
THRESHOLD = 3  # BREAKER_FAILURE_THRESHOLD in conftest.GATE_ENV
OPEN_SECONDS = 30  # BREAKER_RECOVERY_TIMEOUT
MAX_WAITS = 3  # circuit.max_waits in the definition
MAX_WAIT_SECONDS = 60  # circuit.max_wait_seconds
PROBE_SECONDS = 40  # circuit.probe_seconds: how long the Charge step may take
LEASE_SECONDS = 60  # BREAKER_PROBE_LEASE_SECONDS in conftest.GATE_OVERRIDES


def payment(key: str) -> dict[str, Any]:
    return {**PAYMENT, "idempotency_key": key}


def open_the_breaker(stack: Any, payment_api: Any) -> None:
    payment_api.answer(503)
    for n in range(THRESHOLD):
        run = stack.workflow.run(payment(f"fail-{n}"))
        assert run.error == "PaymentDeferred", run
    assert stack.breaker_state() == "open"


def gate_answers(stack: Any, action: str) -> list[dict[str, Any]]:
    return [
        call.result
        for call in stack.lambdas.invocations(stack.gate_function)
        if call.event.get("action") == action and call.result is not None
    ]


# --------------------------------------------------------------------------- lifecycle


def test_lifecycle_closed_open_rejected_probe_closed(
    stack: Any, payment_api: Any, waits: Any
) -> None:
    # GIVEN a healthy provider and a closed breaker
    # WHEN a payment runs THEN it is charged through the allow branch
    run = stack.workflow.run(payment("order-1"))
    assert run.status == "SUCCEEDED"
    assert run.output["status"] == "charged"
    assert run.output["decision"] == "allow"
    assert run.states == [
        "Init",
        "CheckBreaker",
        "RouteOnDecision",
        "Charge",
        "RecordSuccess",
        "Answered",
        "Done",
    ]
    assert payment_api.requests[0].headers["Idempotency-Key"] == "order-1"
    assert stack.breaker_state() == "closed"

    # WHEN the provider fails for THRESHOLD payments THEN each is deferred and the last opens it
    payment_api.answer(503)
    for n in range(THRESHOLD):
        run = stack.workflow.run(payment(f"order-fail-{n}"))
        assert run.status == "FAILED"
        assert run.error == "PaymentDeferred"
        assert "PaymentProviderError" in run.cause
        assert BREAKER in run.cause
        assert run.entered("RecordFailure") == 1
    assert stack.breaker_state() == "open"
    assert payment_api.calls == 1 + THRESHOLD

    # WHEN a payment arrives while it is open (time frozen: the open window never ends)
    # THEN the Choice takes the reject branch, waits MAX_WAITS times, never charges, and defers
    waits.clock_moves = False
    charges_before = stack.charge_calls
    run = stack.workflow.run(payment("order-while-open"))
    assert run.status == "FAILED"
    assert run.error == "PaymentDeferred"
    assert f"circuit {BREAKER} is open after {MAX_WAITS} waits" in run.cause
    assert run.entered("CheckBreaker") == MAX_WAITS + 1
    assert run.entered("WaitForBreaker") == MAX_WAITS
    assert run.entered("Charge") == 0
    assert stack.charge_calls == charges_before
    assert payment_api.calls == 1 + THRESHOLD
    assert waits.seconds == [OPEN_SECONDS] * MAX_WAITS

    # WHEN the open window has passed and the provider is back
    # THEN the next execution is the probe, and its success closes the breaker
    payment_api.mode = "ok"
    waits.clock.advance(OPEN_SECONDS)
    run = stack.workflow.run(payment("order-probe"))
    assert run.status == "SUCCEEDED"
    assert run.output["decision"] == "probe"
    assert stack.breaker_state() == "closed"
    probe_record = gate_answers(stack, "record")[-1]
    assert probe_record["applied"] is True
    assert probe_record["detail"] == "probe succeeded"

    # THEN payments flow through the allow branch again
    run = stack.workflow.run(payment("order-after"))
    assert run.output["decision"] == "allow"
    assert payment_api.calls == 1 + THRESHOLD + 2


def test_a_waiting_execution_probes_when_the_open_window_ends(
    stack: Any, payment_api: Any, waits: Any
) -> None:
    # GIVEN an open breaker and a provider that has recovered
    open_the_breaker(stack, payment_api)
    payment_api.mode = "ok"
    # WHEN a payment arrives THEN it waits out retry_after (the breaker's clock moves with it)
    # and comes back as the probe, which closes the breaker
    run = stack.workflow.run(payment("order-patient"))
    assert run.status == "SUCCEEDED"
    assert run.output["decision"] == "probe"
    assert run.states == [
        "Init",
        "CheckBreaker",
        "RouteOnDecision",
        "WaitForBreaker",
        "CountWait",
        "CheckBreaker",
        "RouteOnDecision",
        "Charge",
        "RecordSuccess",
        "Answered",
        "Done",
    ]
    assert waits.seconds == [OPEN_SECONDS]
    assert stack.breaker_state() == "closed"


def test_a_failed_probe_reopens_the_breaker(stack: Any, payment_api: Any, waits: Any) -> None:
    # GIVEN an open breaker whose window has passed, and a provider still down
    open_the_breaker(stack, payment_api)
    waits.clock.advance(OPEN_SECONDS)
    # WHEN the probe runs THEN its failure is settled with the token and reopens the breaker
    run = stack.workflow.run(payment("order-probe"))
    assert run.error == "PaymentDeferred"
    record = gate_answers(stack, "record")[-1]
    assert (record["applied"], record["state"], record["detail"]) == (
        True,
        "open",
        "probe failed",
    )
    assert stack.breaker_state() == "open"


def test_concurrent_executions_admit_exactly_one_probe(
    stack: Any, payment_api: Any, waits: Any
) -> None:
    # GIVEN an open breaker whose window has passed, and a provider that answers only when
    # the test says so (the probe is still in flight while the others check)
    open_the_breaker(stack, payment_api)
    waits.clock.advance(OPEN_SECONDS)
    waits.clock_moves = False
    payment_api.mode = "ok"
    release = threading.Event()
    payment_api.on_call = lambda: release.wait(30)
    calls_before = payment_api.calls

    # WHEN five executions start together
    arns = [stack.workflow.start(payment(f"order-race-{n}")) for n in range(5)]
    wait_for(lambda: payment_api.calls > calls_before, "an execution reaching the provider")

    # The four that lost the race wait out their bounded loop while the probe is held.
    def finished() -> int:
        client = stack.workflow.client
        return sum(
            client.describe_execution(executionArn=arn)["status"] != "RUNNING" for arn in arns
        )

    wait_for(lambda: finished() >= 4, "the rejected executions finishing")
    release.set()
    runs = [stack.workflow.wait(arn) for arn in arns]

    # THEN exactly one was the probe and charged; the rest were deferred without charging
    probes = [run for run in runs if run.status == "SUCCEEDED"]
    assert len(probes) == 1
    assert probes[0].output["decision"] == "probe"
    assert sorted(run.error for run in runs if run.status == "FAILED") == ["PaymentDeferred"] * 4
    assert payment_api.calls == calls_before + 1
    assert stack.breaker_state() == "closed"


# --------------------------------------------------------------------------- probe deadline


def test_an_execution_turned_away_waits_for_the_probes_deadline_not_the_lease(
    stack: Any, payment_api: Any, waits: Any
) -> None:
    # GIVEN an open breaker whose window has passed, a recovered provider that answers the
    # probe's charge 250 ms in, but only once the test lets it (the probe is in flight)
    open_the_breaker(stack, payment_api)
    waits.clock.advance(OPEN_SECONDS)
    payment_api.mode = "ok"
    release = threading.Event()

    def slow_provider() -> None:
        release.wait(30)
        waits.clock.advance(0.25)

    payment_api.on_call = slow_provider
    calls_before = payment_api.calls
    probe_arn = stack.workflow.start(payment("order-probe"))
    wait_for(lambda: payment_api.calls > calls_before, "the probe reaching the provider")

    # WHEN a second execution checks while the probe runs, and the probe finishes during
    # its wait
    def probe_finishes(_: int) -> None:
        release.set()
        stack.workflow.wait(probe_arn)

    waits.during = probe_finishes
    run = stack.workflow.run(payment("order-patient"))

    # THEN it was told to wait until the probe's deadline (the workflow's probe_seconds),
    # not for the gate's whole lease, and it was charged after that one wait
    assert waits.seconds == [PROBE_SECONDS]
    assert PROBE_SECONDS < LEASE_SECONDS
    assert (run.status, run.output["decision"]) == ("SUCCEEDED", "allow")
    assert run.entered("WaitForBreaker") == 1
    assert stack.workflow.wait(probe_arn).output["decision"] == "probe"


# --------------------------------------------------------------------------- shadow mode


def test_a_shadow_gate_passes_on_what_it_would_have_decided(
    stack_factory: Any, payment_api: Any
) -> None:
    # GIVEN the workflow behind a gate in shadow mode, whose breaker the failures opened
    stack = stack_factory(BREAKER_MODE="shadow")
    open_the_breaker(stack, payment_api)
    payment_api.mode = "ok"
    # WHEN a payment runs
    run = stack.workflow.run(payment("order-shadow"))
    # THEN it is charged, and the execution says the gate let it through where an enforcing
    # gate would have made it wait for the open window
    assert (run.status, run.output["status"], run.output["decision"]) == (
        "SUCCEEDED",
        "charged",
        "allow",
    )
    assert run.output["would"] == {
        "decision": "reject",
        "state": "open",
        "retry_after": float(OPEN_SECONDS),
        "wait_seconds": OPEN_SECONDS,
    }
    assert run.entered("WaitForBreaker") == 0


def test_an_enforcing_gate_passes_on_no_would(stack: Any) -> None:
    run = stack.workflow.run(payment("order-enforced"))
    assert run.status == "SUCCEEDED"
    assert run.output["would"] is None


# --------------------------------------------------------------------------- branches


def test_unknown_decision_takes_the_default_branch(stack: Any, payment_api: Any) -> None:
    # GIVEN a gate answering a decision this workflow does not know (a newer gate, say)
    real_gate = stack.lambdas.handlers[stack.gate_function]

    def newer_gate(event: Any, context: Any) -> Any:
        return {**real_gate(event, context), "decision": "shed"}

    stack.lambdas.register(stack.gate_function, newer_gate)
    # WHEN a payment runs THEN the Choice's Default fails it without charging
    run = stack.workflow.run(payment("order-default"))
    assert run.status == "FAILED"
    assert run.error == "UnexpectedGateDecision"
    assert '"decision":"shed"' in run.cause
    assert BREAKER in run.cause
    assert run.states[-2:] == ["RouteOnDecision", "UnexpectedDecision"]
    assert stack.charge_calls == 0
    assert payment_api.calls == 0


def test_a_gate_error_is_caught_by_name(stack_factory: Any, payment_api: Any) -> None:
    # GIVEN a gate deployed to serve other breakers only (a misconfiguration)
    stack = stack_factory(GATE_ALLOWED_BREAKERS="orders-api")
    # WHEN a payment runs THEN the gate's InvalidGateRequest is caught, named, and nothing
    # is charged
    run = stack.workflow.run(payment("order-misrouted"))
    assert run.status == "FAILED"
    assert run.error == "InvalidGateRequest"
    assert f"'{BREAKER}' is not served by this gate" in run.cause
    assert run.states == ["Init", "CheckBreaker", "BreakerGateFailed"]
    assert stack.charge_calls == 0
    assert payment_api.calls == 0


def test_the_wait_loop_is_bounded_and_each_wait_capped(
    stack_factory: Any, payment_api: Any, waits: Any
) -> None:
    # GIVEN a breaker that stays open for 300 s (longer than the whole loop)
    stack = stack_factory(BREAKER_RECOVERY_TIMEOUT="300")
    stack.gate.breaker(BREAKER).force_open()
    # WHEN a payment runs (the breaker's clock moving with every wait)
    run = stack.workflow.run(payment("order-forced"))
    # THEN it waits MAX_WAITS times, each capped at max_wait_seconds, and ends deferred,
    # naming the breaker
    assert waits.seconds == [MAX_WAIT_SECONDS] * MAX_WAITS
    assert run.status == "FAILED"
    assert run.error == "PaymentDeferred"
    assert f"circuit {BREAKER} is forced_open after {MAX_WAITS} waits" in run.cause
    assert run.states[-1] == "Deferred"
    assert stack.charge_calls == 0


def test_a_stale_probe_token_is_recorded_as_a_no_op(
    stack: Any, payment_api: Any, waits: Any
) -> None:
    # GIVEN an open breaker whose window has passed, and a provider so slow that the probe's
    # lease (BREAKER_PROBE_LEASE_SECONDS=60) runs out before it answers
    open_the_breaker(stack, payment_api)
    waits.clock.advance(OPEN_SECONDS)
    payment_api.mode = "ok"
    payment_api.on_call = lambda: waits.clock.advance(61)
    # WHEN the probe's charge succeeds late
    run = stack.workflow.run(payment("order-slow-probe"))
    # THEN the payment is charged, but the record is a no-op that says so: the breaker stays
    # half-open and the next caller probes again
    assert run.status == "SUCCEEDED"
    assert run.output["decision"] == "probe"
    record = gate_answers(stack, "record")[-1]
    assert record["applied"] is False
    assert record["stale_token"] is True
    assert "stale probe token" in record["detail"]
    assert stack.breaker_state() == "half_open"


# --------------------------------------------------------------------------- outcomes


def test_each_failure_is_counted_once(stack: Any, payment_api: Any) -> None:
    # GIVEN a failing provider
    payment_api.answer(502)
    # WHEN THRESHOLD - 1 payments fail
    for n in range(THRESHOLD - 1):
        stack.workflow.run(payment(f"order-{n}"))
    # THEN the shared record holds exactly that many failures: the charge step counted none
    record = stack.gate.store.load(BREAKER, stack.gate.clock())
    assert record.failures == THRESHOLD - 1
    assert record.state.value == "closed"


def test_a_declined_payment_succeeds_and_counts_as_provider_health(
    stack: Any, payment_api: Any
) -> None:
    # GIVEN a provider that refuses this card
    payment_api.answer(402, {"error": "card_declined"})
    # WHEN the payment runs THEN the execution succeeds with status declined, nothing counted
    run = stack.workflow.run(payment("order-declined"))
    assert run.status == "SUCCEEDED"
    assert run.output["status"] == "declined"
    assert run.output["provider_status"] == 402
    assert run.output["provider_response"] == {"error": "card_declined"}
    assert stack.gate.store.load(BREAKER, stack.gate.clock()) is None


def test_an_invalid_payment_fails_before_reaching_the_provider(
    stack: Any, payment_api: Any
) -> None:
    run = stack.workflow.run({"amount": "12.50", "currency": "EUR"})
    assert run.status == "FAILED"
    assert run.error == "InvalidPaymentRequest"
    assert "amount" in run.cause
    assert "idempotency_key" in run.cause
    assert run.entered("RecordFailure") == 0
    assert payment_api.calls == 0


def test_a_throttled_charge_is_retried_and_counted_once(
    stack: Any, payment_api: Any, waits: Any
) -> None:
    # GIVEN Lambda throttles the first invocation of the charge function
    real_charge = stack.lambdas.handlers[stack.charge_function]
    throttled = []

    def charge(event: Any, context: Any) -> Any:
        if not throttled:
            throttled.append(event)
            raise LambdaThrottled("Rate Exceeded.")
        return real_charge(event, context)

    stack.lambdas.register(stack.charge_function, charge)
    # WHEN a payment runs THEN the Retry runs the charge again after one back-off
    run = stack.workflow.run(payment("order-throttled"))
    assert run.status == "SUCCEEDED"
    assert stack.charge_calls == 2
    assert payment_api.calls == 1
    assert len(waits.retry_intervals) == 1
    assert len(gate_answers(stack, "record")) == 1
