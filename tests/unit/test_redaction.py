"""fleetbreaker.redaction: every rule by example, and what it must leave alone."""

from __future__ import annotations

import pytest
from botocore.credentials import Credentials

from fleetbreaker.redaction import REDACTED, redact, redact_url, split_login, url_secrets
from fleetbreaker.stores.elasticache_iam import ElastiCacheIAMAuth


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("rediss://app:s3cret@cache:6379/0", "rediss://app:***@cache:6379/0"),
        ("redis://:s3cret@cache:6379", "redis://:***@cache:6379"),
        ("redis://app:s%40c%2Fret@cache:6379", "redis://app:***@cache:6379"),
        # typed raw, as users do: up to the authority's last '@'
        ("redis://app:s@c/ret@cache:6379", "redis://app:***@cache:6379"),
        ("redis://cache:6379/0?password=s3cret&db=1", "redis://cache:6379/0?password=***&db=1"),
        (
            "https://api.example.com/charge?api_key=k3y",
            "https://api.example.com/charge?api_key=***",
        ),
        ("app:s3cret@cache:6379", "app:***@cache:6379"),  # the scheme forgotten
    ],
)
def test_a_url_is_shown_without_its_secrets(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        "redis://cache:6379/0",
        "rediss://app@cache:6379",  # a user name alone is no secret
        "http://localhost:8000",
        "redis://cache:6379/0?db=2&ssl_cert_reqs=required",
    ],
)
def test_a_url_without_secrets_is_shown_as_it_is(url: str) -> None:
    assert redact_url(url) == url
    assert url_secrets(url) == ()


def test_the_secrets_of_a_url_are_its_password_and_credential_parameters() -> None:
    url = "redis://app:s%40c@cache:6379/0?password=p%26w&db=1"
    assert set(url_secrets(url)) == {"s%40c", "s@c", "p&w", "p%26w"}


def test_a_secret_known_by_value_is_replaced_wherever_a_library_quoted_it() -> None:
    # GIVEN a message quoting the password alone, decoded, outside any URL
    message = "AUTH rejected 's@c/ret' (from s%40c%2Fret)"

    # THEN the URL's secrets, raw and decoded, are all replaced
    shown = redact(message, url_secrets("redis://app:s%40c%2Fret@cache:6379"))
    assert shown == "AUTH rejected '***' (from ***)"


def test_text_without_secrets_is_left_alone() -> None:
    text = "Redis load failed for breaker 'payment-api': Error 111 connecting to 10.0.0.7:6379."
    assert redact(text) == text


def test_an_elasticache_iam_token_keeps_no_signature_credential_or_session_token() -> None:
    # GIVEN a real token (a SigV4-presigned connect request) quoted in a message
    credentials = Credentials("AKIDEXAMPLEKEYID", "secret/KEY+material", "SESSION/TOKEN==")
    token = ElastiCacheIAMAuth("app", "cache", "eu-west-1", credentials=credentials).token()
    params = dict(pair.split("=", 1) for pair in token.split("?", 1)[1].split("&"))

    shown = redact(f"AUTH app {token} refused")

    # THEN what signs or identifies is gone; what says what it was for stays readable
    for key in ("X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token"):
        assert params[key] not in shown
        assert f"{key}={REDACTED}" in shown
    assert "Action=connect&User=app" in shown
    assert "AKIDEXAMPLEKEYID" not in shown


@pytest.mark.parametrize("character", ["#", "/", "?", "@", ":"])
def test_a_password_typed_raw_is_split_off_whole(character: str) -> None:
    # GIVEN a URL whose password holds a character a URL parser cuts at, typed raw
    url = f"rediss://app:Zulu4{character}Alpha7Kilo@cache:6379/0?db=1"

    # WHEN its login is split off before anything parses it
    address, user, password = split_login(url)

    # THEN the password is whole, the rest is the address, and the shown URL hides all of it
    assert (address, user, password) == ("rediss://cache:6379/0?db=1", "app", url[13:-18])
    assert redact_url(url) == "rediss://app:***@cache:6379/0?db=1"
    assert password in url_secrets(url)


def test_a_password_written_percent_encoded_reads_as_the_same_password() -> None:
    assert split_login("redis://app:s%40c%2Fret@cache:6379") == (
        "redis://cache:6379",
        "app",
        "s@c/ret",
    )


def test_a_url_without_a_login_keeps_everything() -> None:
    assert split_login("redis://cache:6379/0") == ("redis://cache:6379/0", None, None)
    assert split_login("redis://:pw@cache:6379") == ("redis://cache:6379", None, "pw")
