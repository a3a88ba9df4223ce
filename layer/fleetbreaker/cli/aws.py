"""The stores and AWS services the command talks to: which store the options name, the
stack's outputs, the caller's identity."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from fleetbreaker import tuning
from fleetbreaker.errors import ConfigError
from fleetbreaker.stores import (
    IAM_CACHE_ENV,
    IAM_USER_ENV,
    TABLE_ENV,
    URL_ENV,
    StoreNotNamedError,
    StoreSettings,
)

if TYPE_CHECKING:
    from fleetbreaker.stores.base import AdminStore
    from fleetbreaker.stores.dynamodb import DynamoDBStore
    from fleetbreaker.stores.redis import RedisStore
from fleetbreaker.cli.common import (
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    IDENTITY_TIMEOUT_S,
    STORE_TIMEOUT_S,
    CliError,
    printable,
)

# The CLI reads no store variable itself: it maps its options into an environment for the
# functions' store factory (store_environ), which reads them.
REDIS_URL_ENV = URL_ENV
# The outputs of template.yaml the CLI reads with --stack.
TABLE_OUTPUT = "CircuitBreakersTableName"
CACHE_OUTPUT = "BreakerCacheEndpoint"
# The cache's IAM-authenticated user and the cache's name, which its auth tokens are signed for.
CACHE_USER_OUTPUT = "BreakerCacheUserId"
CACHE_NAME_OUTPUT = "BreakerCacheName"


def aws_error(exc: Exception, what: str) -> CliError:
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return CliError(EXIT_UNREACHABLE, f"{what}: {error.get('Code')}: {error.get('Message')}")
    if isinstance(exc, BotoCoreError):
        return CliError(EXIT_UNREACHABLE, f"{what}: {exc}")
    return CliError(EXIT_UNREACHABLE, f"{what}: {type(exc).__name__}: {exc}")


def aws_config() -> Any:
    from botocore.config import Config

    return Config(
        connect_timeout=STORE_TIMEOUT_S,
        read_timeout=STORE_TIMEOUT_S,
        retries={"mode": "standard", "total_max_attempts": 2},
    )


NO_REGION = "no AWS region: pass --region or set AWS_REGION (or AWS_DEFAULT_REGION)"
NO_CREDENTIALS = (
    "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or pass --profile "
    "(or set AWS_PROFILE) naming a profile that has them; a local DynamoDB (--endpoint-url) "
    "accepts any values, e.g. testing"
)
# Where the AWS SDK finds a profile when --profile is not given, in botocore's order: the
# first one set wins, even set empty (a profile named "").
PROFILE_VARIABLES = ("AWS_DEFAULT_PROFILE", "AWS_PROFILE")
# Where it finds a region: the pinned botocore reads AWS_DEFAULT_REGION only, while Lambda,
# the AWS CLI and our messages name AWS_REGION too. The CLI takes AWS_REGION first, as the
# AWS CLI does, then leaves the rest (AWS_DEFAULT_REGION, the profile's region) to the SDK.
REGION_VARIABLE = "AWS_REGION"


def profile_named(profile: str | None) -> tuple[str | None, str]:
    """The profile the SDK will use and what named it: ``--profile``, a variable, or nothing."""
    if profile:
        return profile, "--profile"
    for variable in PROFILE_VARIABLES:
        if variable in os.environ:
            return os.environ[variable], variable
    return None, "--profile"


def aws_session(region: str | None, profile: str | None = None) -> Any:
    """A boto3 session for ``--region`` (else ``AWS_REGION``, else the SDK's own region) and
    ``--profile`` (None: the environment's); an unknown profile is a usage error naming the
    option or variable that named it."""
    import boto3
    from botocore.exceptions import ProfileNotFound

    region = region or os.environ.get(REGION_VARIABLE) or None
    try:
        session = boto3.session.Session(region_name=region, profile_name=profile or None)
        # botocore reads a profile named by a variable lazily: make it fail here, by name.
        session.region_name  # noqa: B018
    except ProfileNotFound:
        name, named_by = profile_named(profile)
        raise CliError(
            EXIT_USAGE,
            f"AWS profile {printable(str(name))!r} not found in the AWS config and credentials "
            f"files (AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE): change {named_by}",
        ) from None
    return session


def require_credentials(session: Any) -> Any:
    """The session's credentials; none at all is a usage error (exit 2) saying how to give
    them, not an unreachable store (a script would retry it)."""
    credentials = session.get_credentials()
    if credentials is None:
        raise CliError(EXIT_USAGE, NO_CREDENTIALS)
    return credentials


def check_endpoint(url: str, named_by: str) -> None:
    """A usage error (exit 2) naming ``named_by`` for an endpoint URL botocore cannot use: no
    http(s) scheme or host, a malformed IPv6 address, a port that is not a number."""
    from urllib.parse import urlsplit

    from fleetbreaker.redaction import redact_url

    shown = printable(redact_url(url))
    try:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CliError(
                EXIT_USAGE,
                f"{named_by} {shown!r} is not an http(s) URL: include the scheme, e.g. "
                "http://localhost:8000",
            )
        parts.port  # noqa: B018  (raises ValueError for a port that is not 0-65535)
    except ValueError as exc:
        raise CliError(
            EXIT_USAGE,
            f"{named_by} {shown!r} is not a valid URL ({exc}): change {named_by}, e.g. "
            "http://localhost:8000",
        ) from None


def configured_endpoint(service: str) -> tuple[str, str] | None:
    """The endpoint botocore would take from the environment for ``service``, and its variable."""
    if os.environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() == "true":
        return None
    for variable in (f"AWS_ENDPOINT_URL_{service.upper()}", "AWS_ENDPOINT_URL"):
        if os.environ.get(variable):
            return os.environ[variable], variable
    return None


def stack_outputs(stack: str, region: str | None, profile: str | None = None) -> dict[str, str]:
    """The outputs of a CloudFormation stack (DescribeStacks)."""
    from botocore.exceptions import ClientError

    session = aws_session(region, profile)
    if not session.region_name:  # unset, or set empty (as dynamodb_client checks)
        raise CliError(EXIT_USAGE, NO_REGION)
    configured = configured_endpoint("cloudformation")
    if configured is not None:
        check_endpoint(*configured)
    require_credentials(session)
    try:
        client = session.client("cloudformation", config=aws_config())
        stacks = client.describe_stacks(StackName=stack)["Stacks"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ValidationError":
            raise CliError(EXIT_USAGE, f"stack {stack!r} not found") from None
        raise aws_error(exc, f"cannot describe stack {stack!r}") from None
    except Exception as exc:
        from botocore.exceptions import NoRegionError

        if isinstance(exc, NoRegionError):
            raise CliError(EXIT_USAGE, NO_REGION) from None
        raise aws_error(exc, f"cannot describe stack {stack!r}") from None
    outputs = stacks[0].get("Outputs", []) if stacks else []
    return {o["OutputKey"]: o["OutputValue"] for o in outputs if "OutputKey" in o}


def store_environ(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment the store factory reads for these options.

    The process's environment, with the store the options name in place of its own:
    --redis-url, --table, else the stack's outputs (cache before table, as the functions
    choose). Without any of them the environment names the store (Redis first, as the
    breaker does).
    """
    env = dict(os.environ if environ is None else environ)
    if args.redis_url is not None or args.table is not None:
        env[URL_ENV] = args.redis_url or ""
        env[TABLE_ENV] = args.table or ""
    elif args.stack is not None:
        outputs = stack_outputs(args.stack, args.region, getattr(args, "profile", None))
        if outputs.get(CACHE_OUTPUT):
            env[URL_ENV] = f"rediss://{outputs[CACHE_OUTPUT]}"
            # The stack's cache admits its IAM user only: sign in as it, with the operator's
            # credentials (which need elasticache:Connect on the cache and the user).
            if outputs.get(CACHE_USER_OUTPUT) and outputs.get(CACHE_NAME_OUTPUT):
                env[IAM_USER_ENV] = outputs[CACHE_USER_OUTPUT]
                env[IAM_CACHE_ENV] = outputs[CACHE_NAME_OUTPUT]
        elif outputs.get(TABLE_OUTPUT):
            env[URL_ENV] = ""
            env[TABLE_ENV] = outputs[TABLE_OUTPUT]
        else:
            raise CliError(
                EXIT_USAGE, f"stack {args.stack!r} has neither {TABLE_OUTPUT} nor {CACHE_OUTPUT}"
            )
    if args.region is not None:
        # The region IAM auth tokens are signed for.
        env["AWS_REGION"] = args.region
    return env


def open_store(args: argparse.Namespace) -> tuple[AdminStore, str]:
    """The store the options name, and a description of it for messages.

    The functions' factory (:class:`~fleetbreaker.stores.StoreSettings`) on
    :func:`store_environ`, with the CLI's longer timeouts and region.
    """
    try:
        settings = StoreSettings.from_env(store_environ(args))
    except StoreNotNamedError:
        raise CliError(
            EXIT_USAGE,
            f"no store: pass --table, --redis-url or --stack, or set {TABLE_ENV} or {URL_ENV}",
        ) from None
    except ConfigError as exc:
        raise CliError(EXIT_USAGE, str(exc)) from None
    client = None
    credentials = None
    if settings.redis_url is None:
        client = dynamodb_client(args)
    elif settings.iam_user is not None:
        # The cache's IAM tokens are signed with these credentials (a profile's, when named).
        found = require_credentials(aws_session(args.region, getattr(args, "profile", None)))
        credentials = found if getattr(args, "profile", None) else None
    store = settings.open(
        boto3_client=client,
        redis_options={
            "socket_timeout": STORE_TIMEOUT_S,
            "socket_connect_timeout": STORE_TIMEOUT_S,
        },
        aws_credentials=credentials,
    )
    # A misconfigured store's errors name what set it: here the option, not the variable the
    # options were mapped into.
    named = _named_by(args)
    if named is not None:
        if settings.redis_url is None:
            cast("DynamoDBStore", store).configured_by = named
        else:
            cache = cast("RedisStore", store)
            cache.configured_by = named
            # The login is the URL's own, or the IAM user the stack's outputs named.
            if settings.iam_user is None or (args.stack is not None and args.redis_url is None):
                cache.credentials_by = named
    return cast("AdminStore", store), settings.description


def _named_by(args: argparse.Namespace) -> str | None:
    """The option that named the store (None: the environment's variables did)."""
    if args.redis_url is not None:
        return "--redis-url"
    if args.table is not None:
        return "--table"
    if args.stack is not None:
        return f"--stack {printable(args.stack)}"
    return None


def dynamodb_client(args: argparse.Namespace) -> Any:
    """The CLI's DynamoDB client; a set-up mistake is a usage error (exit 2) with a hint."""
    from botocore.exceptions import NoRegionError

    endpoint = args.endpoint_url
    if endpoint is not None:
        check_endpoint(endpoint, "--endpoint-url")
    else:
        configured = configured_endpoint("dynamodb")
        if configured is not None:
            check_endpoint(*configured)
    no_region = CliError(EXIT_USAGE, NO_REGION)
    session = aws_session(args.region, getattr(args, "profile", None))
    if not session.region_name:  # unset, or set empty
        raise no_region
    require_credentials(session)
    try:
        return session.client("dynamodb", endpoint_url=endpoint, config=aws_config())
    except NoRegionError:
        raise no_region from None
    except ValueError as exc:  # botocore's "Invalid endpoint" and the like
        raise CliError(EXIT_USAGE, f"cannot set up the DynamoDB client: {exc}") from None


def caller_identity(args: argparse.Namespace) -> str:
    """Who is acting: the STS caller ARN on AWS, else the local user.

    Best effort and bounded: an operator must never be stopped by STS. A local DynamoDB
    (--endpoint-url) has no AWS identity, unless an STS endpoint is configured too.
    """
    sts_configured = os.environ.get("AWS_ENDPOINT_URL_STS") or os.environ.get("AWS_ENDPOINT_URL")
    if args.endpoint_url is not None and not sts_configured:
        return tuning.local_user()
    try:
        from botocore.config import Config

        config = Config(
            connect_timeout=IDENTITY_TIMEOUT_S,
            read_timeout=IDENTITY_TIMEOUT_S,
            retries={"mode": "standard", "total_max_attempts": 1},
        )
        session = aws_session(args.region, getattr(args, "profile", None))
        client = session.client("sts", config=config)
        arn = client.get_caller_identity()["Arn"]
    except Exception:
        return tuning.local_user()
    return arn if isinstance(arn, str) and arn else tuning.local_user()
