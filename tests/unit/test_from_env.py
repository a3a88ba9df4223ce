"""Store and deadline settings from the environment: one reading for every function."""

from __future__ import annotations

import sys

import pytest

from fleetbreaker import BreakerConfig, ConfigError, DynamoDBStore, RedisStore
from fleetbreaker.config import env_field, env_number, env_variable
from fleetbreaker.stores import from_env

TABLE = {"CIRCUIT_BREAKER_TABLE": "CircuitBreakers"}
REDIS = {"CIRCUIT_BREAKER_REDIS_URL": "rediss://cache.example.com:6379"}


def test_a_table_name_gives_a_dynamodb_store() -> None:
    store = from_env(TABLE, endpoint_url="http://127.0.0.1:1")

    assert isinstance(store, DynamoDBStore)
    assert store.table_name == "CircuitBreakers"


@pytest.fixture
def no_region(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine outside Lambda: no region variable, no profile that names one."""
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")


@pytest.mark.usefixtures("no_region")
def test_aws_region_alone_gives_the_table_its_region() -> None:
    # GIVEN only AWS_REGION in the environment read (the pinned boto3 reads AWS_DEFAULT_REGION)
    store = from_env({**TABLE, "AWS_REGION": "eu-west-1"})

    # THEN the table's client is in that region (not a store with no region: per-container)
    assert isinstance(store, DynamoDBStore)
    assert store.client.meta.region_name == "eu-west-1"


@pytest.mark.usefixtures("no_region")
def test_aws_region_wins_over_aws_default_region() -> None:
    store = from_env({**TABLE, "AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-west-2"})

    assert isinstance(store, DynamoDBStore)
    assert store.client.meta.region_name == "eu-west-1"


def test_a_table_store_built_directly_honours_aws_region(
    no_region: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN only AWS_REGION exported, and a DynamoDBStore built without from_env
    monkeypatch.setenv("AWS_REGION", "ap-south-1")

    # THEN its client is in that region
    assert DynamoDBStore("CircuitBreakers").client.meta.region_name == "ap-south-1"


def test_a_redis_url_wins_over_the_table() -> None:
    store = from_env({**TABLE, **REDIS})

    assert isinstance(store, RedisStore)
    store.close()


@pytest.mark.parametrize("url", ["http://cache:6379", "cache:6379", "unix:///tmp/redis.sock"])
def test_a_redis_url_of_another_scheme_is_refused_by_name(url: str) -> None:
    with pytest.raises(ConfigError, match="CIRCUIT_BREAKER_REDIS_URL must be a redis://"):
        from_env({**TABLE, "CIRCUIT_BREAKER_REDIS_URL": url})


@pytest.mark.parametrize("env", [{}, {"CIRCUIT_BREAKER_TABLE": "  "}])
def test_no_store_named_is_an_error_naming_both_variables(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"CIRCUIT_BREAKER_TABLE.*CIRCUIT_BREAKER_REDIS_URL"):
        from_env(env)


def test_the_store_deadline_defaults_to_one_second() -> None:
    assert BreakerConfig().store_deadline_seconds == 1.0


def test_the_store_deadline_is_read_from_the_environment() -> None:
    config = BreakerConfig.from_env({"BREAKER_STORE_DEADLINE_SECONDS": "0.5"})

    assert config.store_deadline_seconds == 0.5


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "1", True])
def test_a_bad_store_deadline_is_refused_by_name(value: object) -> None:
    with pytest.raises(ConfigError, match="store_deadline_seconds must be a positive number"):
        BreakerConfig(store_deadline_seconds=value)  # type: ignore[arg-type]


def test_a_bad_store_deadline_variable_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="BREAKER_STORE_DEADLINE_SECONDS"):
        BreakerConfig.from_env({"BREAKER_STORE_DEADLINE_SECONDS": "0"})


@pytest.mark.parametrize(
    ("variable", "raw"),
    [
        ("BREAKER_WINDOW_SECONDS", "1e308"),
        ("BREAKER_STORE_DEADLINE_SECONDS", "1e10"),
        ("BREAKER_RECOVERY_TIMEOUT", "1e12"),
        ("BREAKER_SLOW_CALL_DURATION", "1e11"),
        ("BREAKER_FAILURE_THRESHOLD", "1" + "0" * 400),
        ("BREAKER_MINIMUM_CALLS", "100000000000000"),
    ],
)
def test_a_variable_past_the_bounds_is_refused_naming_it(variable: str, raw: str) -> None:
    # A value the breaker could not live with (the clock, thread waits, 14-digit records)
    with pytest.raises(ConfigError, match=f"{variable}: .* up to"):
        BreakerConfig.from_env({variable: raw})


# -- env_number: the functions' own numeric settings ----------------------------------------------


@pytest.mark.parametrize(
    ("raw", "kind", "allow_zero", "value"),
    [
        (None, float, False, 7.0),
        ("  ", float, False, 7.0),
        (" 2.5 ", float, False, 2.5),
        ("3", int, False, 3),
        ("0", float, True, 0.0),
    ],
)
def test_env_number_reads_a_number_or_gives_the_default(
    raw: str | None, kind: type[int] | type[float], allow_zero: bool, value: float
) -> None:
    env = {} if raw is None else {"SETTING": raw}
    read = env_number(env, "SETTING", 7.0, kind, allow_zero=allow_zero)
    assert (read, type(read)) == (value, type(value))


@pytest.mark.parametrize(
    ("raw", "kind", "allow_zero", "message"),
    [
        ("ten", float, False, "SETTING must be a number, got 'ten'"),
        ("2.5", int, False, "SETTING must be a whole number, got '2.5'"),
        ("0", float, False, "SETTING must be > 0, got '0'"),
        ("-1", float, True, "SETTING must be >= 0, got '-1'"),
        ("inf", float, False, "SETTING must be > 0, got 'inf'"),
        ("nan", float, True, "SETTING must be >= 0, got 'nan'"),
    ],
)
def test_env_number_refuses_anything_else_naming_the_variable(
    raw: str, kind: type[int] | type[float], allow_zero: bool, message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        env_number({"SETTING": raw}, "SETTING", 7.0, kind, allow_zero=allow_zero)
    assert str(refused.value) == message


@pytest.mark.parametrize("value", [True, "0.5", float("nan")])
def test_a_failure_rate_threshold_must_be_a_real_number(value: object) -> None:
    with pytest.raises(ConfigError, match="failure_rate_threshold must be a fraction"):
        BreakerConfig(failure_rate_threshold=value)  # type: ignore[arg-type]


def test_env_number_refuses_zero_unless_told_to_allow_it() -> None:
    with pytest.raises(ConfigError, match="SETTING must be > 0, got '0'"):
        env_number({"SETTING": "0"}, "SETTING", 7.0)


def test_env_field_is_none_when_its_variable_is_unset_or_empty() -> None:
    assert env_field("window_seconds", {}) is None
    assert env_field("window_seconds", {"BREAKER_WINDOW_SECONDS": " "}) is None


def test_a_field_not_read_from_the_environment_is_refused_by_name() -> None:
    with pytest.raises(ConfigError) as refused:
        env_variable("fallback")
    assert str(refused.value) == "'fallback' is not read from the environment"


@pytest.mark.parametrize(
    ("raw", "verify"),
    [
        *[(raw, True) for raw in ("true", "TRUE", "1", "yes", "on")],
        *[(raw, False) for raw in ("false", "False", "0", "no", "off")],
    ],
)
def test_breaker_verify_store_is_read_as_a_boolean(raw: str, verify: bool) -> None:
    assert BreakerConfig.from_env({"BREAKER_VERIFY_STORE": raw}).verify_store is verify


def test_breaker_verify_store_defaults_to_off() -> None:
    assert BreakerConfig.from_env({}).verify_store is False


def test_a_breaker_verify_store_that_is_no_boolean_is_refused_by_name() -> None:
    # bool("false") is True: a value that is not spelled as a boolean must not turn it on
    with pytest.raises(ConfigError, match="BREAKER_VERIFY_STORE must be true or false"):
        BreakerConfig.from_env({"BREAKER_VERIFY_STORE": "enabled"})


def test_verify_store_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError, match="verify_store must be True or False"):
        BreakerConfig(verify_store="yes")  # type: ignore[arg-type]


@pytest.fixture
def without_redis_py(monkeypatch: pytest.MonkeyPatch) -> None:
    """redis-py unimportable, as on the slim layer (None in sys.modules fails the import)."""
    monkeypatch.setitem(sys.modules, "redis", None)


@pytest.mark.usefixtures("without_redis_py")
@pytest.mark.parametrize(
    "env",
    [
        REDIS,
        {
            **REDIS,
            "CIRCUIT_BREAKER_REDIS_IAM_USER": "fleetbreaker",
            "CIRCUIT_BREAKER_REDIS_IAM_CACHE": "breakers",
            "AWS_REGION": "eu-west-1",
        },
    ],
    ids=["password", "iam"],
)
def test_a_redis_url_without_redis_py_names_the_variable_and_the_full_layer(
    env: dict[str, str],
) -> None:
    # GIVEN no redis-py WHEN the environment selects Redis
    with pytest.raises(ConfigError) as raised:
        from_env(env)
    # THEN the error names the variable, and the layer to attach instead
    message = str(raised.value)
    assert message.startswith("CIRCUIT_BREAKER_REDIS_URL selects the Redis store, but RedisStore")
    assert "slim fleetbreaker layer" in message
    assert "/<stack>/fleetbreaker/<runtime>/layer-arn" in message
    assert "from a clone of fleetbreaker: pip install '.[redis]'" in message


@pytest.mark.usefixtures("without_redis_py")
def test_a_redis_store_without_redis_py_names_the_full_layer() -> None:
    # GIVEN no redis-py WHEN a RedisStore is built from a URL THEN the error says what to attach
    with pytest.raises(ConfigError, match=r"^RedisStore needs redis-py, .* full layer"):
        RedisStore(url="redis://127.0.0.1:1")
