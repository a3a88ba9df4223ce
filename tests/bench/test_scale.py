"""bench/scale.py run small: a few hundred containers for a few virtual seconds.

The figures in bench/README.md come from the full run (`make scale`); this checks the
invariants the simulation is there to show, on the same code path, without timing anything,
and that its DynamoDB model counts exactly the requests DynamoDBStore makes on moto's server.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from bench import scale
from bench.scale import (
    ITEM_READ_TARGET,
    ITEM_WRITE_CAP,
    PARTIAL_OPEN_WITHIN_WINDOWS,
    READ_UNITS,
    DynamoDBModelStore,
    Result,
    Scenario,
    config_for,
    join_times_ms,
    lmi_scenarios,
    simulate,
    verdicts,
)
from devtools.servers import dynamodb_client, make_table
from fleetbreaker import CircuitBreaker, DynamoDBStore, MemoryStore
from tests.coverage_scope import traced, untraced

CONTAINERS = 20
TIMELINE = {"settle_s": 1.0, "noise_s": 3.0, "outage_s": 6.0, "calls_per_s": 2_000}


# The two largest runs here (2,000 containers; 4 environments of 8 processes, twice) trace one
# container in TRACED_ONE_IN (LMI_TRACED_ONE_IN) under coverage, and run the rest untraced:
# the same lines and branches as the whole runs traced (compared on this file), at half the
# CPU (the two tests: 20.3 s, 10 to 11 s after; 6.6 s without coverage). One process in 8
# missed lines of the shared view (a lock file made by another process, a copy older than
# the process's own view).
TRACED_ONE_IN = 20
LMI_TRACED_ONE_IN = 3


class _TracedBreaker(CircuitBreaker):
    """A breaker whose entry points (as bench/scale.py's simulation uses them) run traced by
    coverage inside an untraced run (tests/coverage_scope.py)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        traced(super().__init__, *args, **kwargs)

    def call(self, *args: Any, **kwargs: Any) -> Any:
        return traced(super().call, *args, **kwargs)

    @property
    def state(self) -> Any:
        return traced(CircuitBreaker.state.fget, self)  # type: ignore[attr-defined]


def simulate_sampled(
    monkeypatch: pytest.MonkeyPatch, every: int, scenario: Scenario, store: Any, *names: str
) -> Result:
    """``simulate``, untraced by coverage but for one container in ``every`` (in the order
    they join). Every container runs the same lines, at scale too: a sample traced covers
    what they cover (compared with the whole run traced), at a fraction of the CPU."""
    built = itertools.count()

    def build(*args: Any, **kwargs: Any) -> CircuitBreaker:
        kind = _TracedBreaker if next(built) % every == 0 else CircuitBreaker
        return kind(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(scale, "CircuitBreaker", build)
        result: Result = untraced(simulate)(scenario, store, *names)
    return result


def _run(policy: str, noise: float = 0.005, arrival: str = "burst") -> Result:
    scenario = Scenario(CONTAINERS, policy, arrival, noise, **TIMELINE)
    return simulate(scenario, MemoryStore(), "memory", f"tiny-{policy}-{noise}-{arrival}")


@pytest.fixture(scope="module")
def rate() -> Result:
    return _run("rate")


@pytest.fixture(scope="module")
def count() -> Result:
    return _run("count")


def test_rate_policy_does_not_trip_on_half_a_percent_of_noise(rate: Result) -> None:
    # GIVEN 20 containers with 0.5 % of calls failing at random (about 10 failures a second)
    # WHEN the rate policy (50 % over 10 s, and over its newest 2 s) watches them
    # THEN the breaker never opens and no healthy call is rejected
    assert rate.healthy_calls > 0
    assert rate.spurious_trips == 0
    assert rate.healthy_rejected == 0


def test_rate_policy_does_not_trip_on_two_percent_of_noise() -> None:
    result = _run("rate", noise=0.02)
    assert result.healthy_calls > 0
    assert result.spurious_trips == 0


def test_count_policy_trips_on_the_same_noise(count: Result) -> None:
    # GIVEN the same fleet and noise, WHEN the count policy (5 failures in 60 s) watches it
    # THEN the noise alone opens the breaker and healthy calls are rejected
    assert count.spurious_trips >= 1
    assert count.healthy_rejected > 0


def test_rate_policy_opens_within_three_seconds_of_a_full_outage(rate: Result) -> None:
    # GIVEN 3 s of healthy calls in the window, WHEN every call starts failing
    # THEN the newest buckets reach 50 % within two of them (2 s) and every container
    # rejects within one cache_ttl (1 s) more
    assert rate.seconds_to_open is not None
    assert 0 < rate.seconds_to_open <= 2.0
    assert rate.seconds_to_fleet_rejecting is not None
    assert rate.seconds_to_fleet_rejecting <= 3.0


def test_a_partial_outage_at_two_thousand_containers_opens_within_one_and_a_half_windows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN 2,000 containers at 5 calls a second each (10,000 calls/s), reporting at stretched
    # intervals of about 8 s, with 12 s of healthy calls in the window
    scenario = Scenario(
        2_000, "rate", "burst", 0.005, settle_s=1.0, noise_s=12.0, outage_s=16.0, outage_share=0.6
    )
    # WHEN 60 % of calls start failing (the policy opens at 50 %)
    result = simulate_sampled(
        monkeypatch, TRACED_ONE_IN, scenario, MemoryStore(), "memory", "partial-2000"
    )
    # THEN the fleet reported as at scale: stretched, at a quarter of the base interval's
    # 2,000 reports a second or fewer (the case the bound is about)
    assert result.healthy_write_units_per_s < 2_000 / 4
    # AND the breaker opens within 1.5 windows (15 s), and in fact within two buckets and a
    # bit: the newest buckets hold the calls made since the outage, not the stretched
    # intervals' older healthy ones (9 to 11 s before, when they did)
    assert result.spurious_trips == 0
    assert result.seconds_to_open is not None
    assert result.seconds_to_open <= PARTIAL_OPEN_WITHIN_WINDOWS * config_for("rate").window_seconds
    assert result.seconds_to_open <= 3.0


def test_count_policy_fleet_rejects_within_one_cache_ttl_from_closed() -> None:
    # GIVEN a closed breaker (no noise), WHEN every call starts failing
    # THEN the fifth failure trips it and every container rejects within cache_ttl
    result = _run("count", noise=0.0)
    assert result.seconds_to_open is not None
    assert result.seconds_to_open < 0.1
    assert result.seconds_to_fleet_rejecting is not None
    assert result.seconds_to_fleet_rejecting <= 1.0


def test_units_stay_inside_one_partition(rate: Result, count: Result) -> None:
    # GIVEN both policies through noise and outage, THEN their requests reached the store,
    # and no second took more units than the targets on one item
    for result in (rate, count):
        assert result.writes > 0
        assert result.peak_write_units_per_s <= ITEM_WRITE_CAP
        assert result.peak_read_units_per_s <= ITEM_READ_TARGET


def _over_reads(arrival: str) -> Result:
    result = Result("ddb-model", "count", 5_000, arrival, 0.0)
    result.peak_read_units_per_s = ITEM_READ_TARGET + 100
    return result


def test_a_burst_over_the_targets_is_reported_outside_them() -> None:
    # GIVEN a 5,000-container burst whose first second reads over the target
    lines = verdicts([_over_reads("burst")])

    # THEN it is reported, marked outside the target, and the targets still count as met
    assert lines[0].startswith("over (outside target) units: ddb-model 5000 burst")
    assert lines[-1] == "every target met"


@pytest.mark.parametrize("arrival", ["lambda", "ramp100"])
def test_an_arrival_lambda_allows_over_the_targets_misses_them(arrival: str) -> None:
    lines = verdicts([_over_reads(arrival)])

    assert lines == [
        f"MISSED units: ddb-model 5000 {arrival} count noise 0.0%: peak 2,500 read / 0 write "
        "units/s"
    ]


def test_read_units_are_half_a_unit_per_refresh(rate: Result) -> None:
    # GIVEN the run's per-second read units, THEN they add up to its reads at half a unit
    assert sum(rate.read_units_per_s) == pytest.approx(rate.reads * READ_UNITS)


def test_lambda_arrival_adds_a_thousand_containers_every_ten_seconds() -> None:
    # GIVEN 2,500 containers arriving as Lambda scales a function
    joins = join_times_ms("lambda", 2_500, __import__("random").Random(1))
    # THEN 1,000 join within the first second, 1,000 more in the 11th, the rest in the 21st
    assert [sum(1 for j in joins if s * 1000 <= j < (s + 1) * 1000) for s in (0, 10, 20)] == [
        1_000,
        1_000,
        500,
    ]
    assert max(joins) < 21_000


@pytest.mark.parametrize("policy", ["rate", "count"])
def test_dynamodb_model_counts_the_requests_dynamodb_store_makes(
    moto_server: str, policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The breakers' store deadline is 1 s: on a busy machine one of moto's answers can take
    # longer, and the container that waited runs on local state for a while, making fewer
    # requests than the model counts. What is compared here is the requests, not the time.
    config_for = scale.config_for
    monkeypatch.setattr(
        scale,
        "config_for",
        lambda policy: dataclasses.replace(config_for(policy), store_deadline_seconds=30),
    )
    # GIVEN the same run of 100 containers on DynamoDBStore (moto's server) and on the model
    # that prices 5,000: MemoryStore's rules plus DynamoDBStore's lost fences (the count
    # policy's run: its census writes, its failures, the trip)
    # (a deadline no request misses on a loaded machine: a degraded run makes other requests)
    scenario = Scenario(
        100,
        policy,
        "burst",
        0.005,
        settle_s=1.0,
        noise_s=2.0,
        outage_s=3.0,
        calls_per_s=600,
        store_deadline_s=60.0,
    )
    table = make_table(moto_server)
    real = DynamoDBStore(table, boto3_client=dynamodb_client(moto_server))
    model = DynamoDBModelStore()

    # WHEN both run it
    on_dynamodb = simulate(scenario, real, "moto", f"model-check-{policy}")
    on_model = simulate(scenario, model, "ddb-model", f"model-check-{policy}")

    # THEN they made the same store requests, reads and lost fences included, second by second
    assert model.fence_misses > 0
    assert on_model.reads == on_dynamodb.reads
    assert on_model.writes == on_dynamodb.writes
    assert on_model.read_units_per_s == on_dynamodb.read_units_per_s
    assert on_model.write_units_per_s == on_dynamodb.write_units_per_s
    assert on_model.seconds_to_open == on_dynamodb.seconds_to_open


# --------------------------------------------------------------------------- results files

RESULTS = scale.REPO_ROOT / "bench" / "results"


def _part(tmp_path: Path, doc: dict[str, Any], seeds: set[int], name: str) -> Path:
    path = tmp_path / name
    rows = [row for row in doc["results"] if row["seed"] in seeds]
    path.write_text(json.dumps({**doc, "results": rows}))
    return path


def test_merging_a_run_made_in_parts_gives_the_file_one_run_writes(tmp_path: Path) -> None:
    # GIVEN the seeded 5,000-container runs split by seed, the later seeds first
    whole = json.loads((RESULTS / "scale_seeds.json").read_text())
    late = _part(tmp_path, whole, {4, 5}, "late.json")
    early = _part(tmp_path, whole, {1, 2, 3}, "early.json")

    # WHEN they are merged
    merged = scale.merge([late, early])

    # THEN every scenario keeps its place and its seeds come in order, cost derived again
    assert merged["results"] == whole["results"]
    assert merged["cost"] == scale.cost([Result(**row) for row in whole["results"]])
    assert merged["environment"]["merged_from"] == ["late.json", "early.json"]


def test_merging_refuses_a_part_priced_otherwise(tmp_path: Path) -> None:
    doc = json.loads((RESULTS / "scale_rate60.json").read_text())
    doc["prices_assumed"]["dynamodb_per_million_read_units"] = 0.25
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SystemExit, match=r"old\.json: priced otherwise"):
        scale.merge([path])


def test_merging_refuses_a_part_that_does_not_say_how_it_was_run(tmp_path: Path) -> None:
    doc = json.loads((RESULTS / "scale_rate60.json").read_text())
    del doc["environment"]
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SystemExit, match=r"bare\.json: no environment"):
        scale.merge([path])


def test_merging_refuses_a_seed_run_twice(tmp_path: Path) -> None:
    doc = json.loads((RESULTS / "scale_rate60.json").read_text())
    one = _part(tmp_path, doc, {1, 2}, "one.json")
    two = _part(tmp_path, doc, {2, 3}, "two.json")
    with pytest.raises(SystemExit, match="seed 2 is in more than one file"):
        scale.merge([one, two])


def test_a_run_writes_how_it_was_run_its_targets_and_its_cost(tmp_path: Path) -> None:
    # GIVEN a tiny run through the command line
    output = tmp_path / "tiny.json"
    argv = [
        "--containers", "20", "--arrivals", "burst", "--policies", "rate",
        "--noise-policies", "", "--partial-containers", "", "--lmi-environments", "0",
        "--timeline", "1,2,2", "--output", str(output),
    ]  # fmt: skip

    # WHEN it runs
    assert scale.main(argv) == 0

    # THEN its file says how it was run, what it was judged against and what it costs
    doc = json.loads(output.read_text())
    assert doc["environment"]["command"] == "bench/scale.py " + " ".join(
        shlex.quote(arg) for arg in argv
    )
    assert doc["targets"] == scale.targets()
    assert [c["store"] for c in doc["cost"]] == [
        "DynamoDB on-demand",
        "ElastiCache Serverless (Valkey)",
    ]
    assert doc["cost"] == scale.cost([Result(**row) for row in doc["results"]])


def test_the_processes_of_an_environment_share_their_reads_of_the_modelled_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN 4 environments of 8 processes on the modelled DynamoDB table, run twice: each
    # process reading for itself, and the processes of an environment sharing their reads
    reads = {}
    for scenario in lmi_scenarios(4, [8], ["count"], (2.0, 2.0, 1.0)):
        result = simulate_sampled(
            monkeypatch, LMI_TRACED_ONE_IN, scenario, DynamoDBModelStore(), "ddb-model", "lmi"
        )
        reads[scenario.refresh] = result.reads
    # THEN sharing reads the table several times less (once per environment, not process)
    assert reads["environment"] * 3 < reads["process"]
