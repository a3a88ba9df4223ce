"""``fleetbreaker doctor``: the store's checks (:mod:`fleetbreaker.stores.doctor`), one line
each, and what to change named as the option or variable that set it.

Its exit codes are the other commands': 0 every check passed, 1 the store answered and a
check failed (a setting to change), 2 a usage error, 3 the store gave no answer (a script
retries that one, as it retries ``status``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from fleetbreaker.cli.aws import (
    CACHE_NAME_OUTPUT,
    CACHE_OUTPUT,
    CACHE_USER_OUTPUT,
    TABLE_OUTPUT,
    open_store,
)
from fleetbreaker.cli.common import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CliError,
    printable,
)
from fleetbreaker.cli.view import write_json
from fleetbreaker.errors import ConfigError
from fleetbreaker.naming import validate_name
from fleetbreaker.stores import IAM_CACHE_ENV, IAM_USER_ENV, TABLE_ENV, URL_ENV

if TYPE_CHECKING:
    from fleetbreaker.stores.doctor import Check


def doctor(args: argparse.Namespace, out: TextIO, clock: Callable[[], int]) -> int:
    """Every check of the store, one line each; CliError naming what to change: exit 3 when
    the store gave no answer (as every command exits when it cannot reach the store), else 1."""
    from fleetbreaker.stores.doctor import run_checks

    name = None
    if args.name is not None:
        try:
            name = validate_name(args.name)
        except ConfigError as exc:
            raise CliError(EXIT_USAGE, str(exc)) from None
    store, where = open_store(args)
    found = run_checks(store, name, clock())
    failures = [check for check in found if check.failed]
    if args.output == "text":
        out.write(f"doctor: {printable(where)}\n")
        for check in found:
            out.write(render_check(check, args) + "\n")
    else:
        lines = [check_json(check, args) for check in found]
        payload = {"store": where, "ok": not failures, "checks": lines}
        write_json(out, args.output, payload if args.output == "json" else lines)
    out.flush()
    if failures:
        named = "; ".join(
            f"{check.name} (the fix above)"
            if check.setting is None
            else f"{check.name} (change {setting_text(check.setting, args)})"
            for check in failures
        )
        unanswered = any(check.unanswered for check in failures)
        code = EXIT_UNREACHABLE if unanswered else EXIT_NOT_FOUND
        raise CliError(code, f"doctor: {len(failures)} check(s) failed: {named}")
    return EXIT_OK


def setting_text(setting: str | None, args: argparse.Namespace) -> str:
    """The option or variable behind a check's ``setting``, as this command was run."""
    from fleetbreaker.stores import doctor as checks

    stack = f"--stack {printable(args.stack)}" if args.stack is not None else None
    if setting == checks.TABLE:
        if args.table is not None:
            return "--table"
        return f"{stack} (its output {TABLE_OUTPUT})" if stack else TABLE_ENV
    if setting == checks.REDIS_URL:
        if args.redis_url is not None:
            return "--redis-url"
        return f"{stack} (its output {CACHE_OUTPUT})" if stack else URL_ENV
    if setting == checks.IAM_USER:
        if stack and args.redis_url is None:
            return f"{stack} (its outputs {CACHE_USER_OUTPUT} and {CACHE_NAME_OUTPUT})"
        return f"{IAM_USER_ENV} and {IAM_CACHE_ENV}"
    if setting == checks.URL_LOGIN:
        if args.redis_url is not None:
            return "the user and password in --redis-url"
        return (
            f"{stack} (its output {CACHE_OUTPUT})"
            if stack
            else f"the user and password in {URL_ENV}"
        )
    if setting == checks.CA:
        # The CLI trusts what OpenSSL's default paths hold; SSL_CERT_FILE points them at a bundle.
        return "SSL_CERT_FILE (the CA bundle this machine trusts)"
    if setting == checks.ACCESS:
        return "the cache user's access string"
    if setting == checks.CREDENTIALS:
        return "--profile, or the AWS credentials in the environment"
    if setting == checks.ENDPOINT:
        # The one this run was given, when it was given one (the cli's parser names both).
        given = [
            option
            for option, value in (
                ("--endpoint-url", getattr(args, "endpoint_url", None)),
                ("--region", getattr(args, "region", None)),
            )
            if value is not None
        ]
        return " and ".join(given) if given else "--region or --endpoint-url"
    if setting == checks.POLICY:
        return "the caller's IAM policy"
    return "nothing of yours"


def render_check(check: Check, args: argparse.Namespace) -> str:
    """One line: the status, the check, what was found and, for a failure, the fix."""
    line = f"{check.status:<4}  {check.name:<10}  {check.detail}"
    if check.failed:
        change = f"change {setting_text(check.setting, args)}" if check.setting else "fix"
        line += f"; {change}: {check.fix}"
    return printable(line)


def check_json(check: Check, args: argparse.Namespace) -> dict[str, Any]:
    """A check's JSON object: ``check``, ``status`` (``ok``, ``FAIL``, ``skip``), ``detail``,
    and for a failure ``fix`` and ``change`` (the option or variable; null when none)."""
    failed = check.failed
    return {
        "check": check.name,
        "status": check.status,
        "detail": check.detail,
        "fix": check.fix if failed else None,
        "change": setting_text(check.setting, args) if failed and check.setting else None,
    }
