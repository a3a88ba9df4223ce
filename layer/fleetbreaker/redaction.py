"""Secrets out of every message: URL passwords, tokens and presigned-URL signatures.

A Redis URL may carry a password (``rediss://user:secret@host:6379``), an ElastiCache IAM
token is a SigV4-presigned URL, and either can end up in an exception's text: the store's own
messages quote the URL they refuse, and a client library's may quote any part of it. Every
place that turns such text into something a person or a system keeps (an exception message,
a log line, a span attribute, the CLI's output) passes it through :func:`redact` first, so
``***`` stands where the secret was.

Two rules, applied together:

- by shape: the password of any ``scheme://user:password@host`` URL, and the value of any
  query parameter that carries a credential (``password``, ``token``, ``X-Amz-Signature``,
  ``X-Amz-Credential``, ``X-Amz-Security-Token``, ... :data:`SECRET_PARAMETERS`), wherever
  they appear in the text;
- by value: each secret the caller knows (``secrets=``, for example from
  :func:`url_secrets` of the URL a message is about), raw or percent-encoded, even where a
  library quoted it without its URL around it.

Example
-------
>>> redact_url("rediss://app:s3cret@cache.example.com:6379/0")
'rediss://app:***@cache.example.com:6379/0'
>>> redact("port in 'redis://:s3cret@host:x' is not a number")
"port in 'redis://:***@host:x' is not a number"
>>> redact("AUTH failed for s3cret", secrets=("s3cret",))
'AUTH failed for ***'
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote, unquote

REDACTED = "***"

# Query parameters whose values are credentials (compared without case): passwords and tokens
# as clients take them in URLs, and the three parts of a SigV4 presigned URL that sign or
# identify (an ElastiCache IAM token is one).
SECRET_PARAMETERS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "secret",
        "token",
        "access_token",
        "auth",
        "api_key",
        "apikey",
        "signature",
        "sig",
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
    }
)


@functools.cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    # Compiled on the first message that needs them, never by an import on the hot path.
    # A URL's password runs from the ':' after the user to the authority's last '@' (a
    # password typed with a raw '@' or '/' in it included), within one quoted or unquoted
    # word of the text.
    userinfo = re.compile(
        r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@\s'\"]*:)(?P<secret>[^\s'\"]*)(?=@)"
    )
    names = "|".join(sorted((re.escape(name) for name in SECRET_PARAMETERS), key=len)[::-1])
    parameter = re.compile(rf"(?i)(?P<head>(?:^|[?&;\s'\"])(?:{names})=)(?P<secret>[^&#\s'\"]*)")
    return userinfo, parameter


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret in it replaced by ``***`` (see the module's rules)."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        for form in {secret, quote(secret, safe=""), quote(secret)}:
            text = text.replace(form, REDACTED)
    userinfo, parameter = _patterns()
    text = userinfo.sub(lambda m: m.group("head") + REDACTED if m.group("secret") else m[0], text)
    return parameter.sub(lambda m: m.group("head") + REDACTED if m.group("secret") else m[0], text)


def split_login(url: str) -> tuple[str, str | None, str | None]:
    """``url`` without its login, and the login's user and password (decoded; None where
    absent): what every URL goes through before anything parses it.

    The login runs from after ``scheme://`` to the URL's last ``@``, and the password from
    the first ``:`` in it: a password typed raw with ``@``, ``/``, ``?``, ``#`` or ``:`` in
    it stays whole, where a URL parser would cut it at the first of them and show the rest
    as a host, a port or a path. Each part is percent-decoded, so one written encoded
    (``%40`` for ``@``) reads the same; a raw ``%`` is written ``%25``. A URL without ``@``
    has no login. What it trusts: that an ``@`` after the host is written ``%40`` (no option
    of redis-py's takes one); a raw one there would be read as the end of a login, with what
    follows it as the host (shown redacted, never as a secret in clear). A URL written
    without its scheme (``user:pw@host:6379``, a common slip) is read as one that has it.

    Example
    -------
    >>> split_login("rediss://app:pa/ss#w@rd@cache.example.com:6379/0")
    ('rediss://cache.example.com:6379/0', 'app', 'pa/ss#w@rd')
    >>> split_login("redis://cache:6379")
    ('redis://cache:6379', None, None)
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    login, at, address = rest.rpartition("@")
    if not at:
        return url, None, None
    user, _, password = login.partition(":")
    head = f"{scheme}{sep}"
    return head + address, unquote(user) or None, unquote(password) or None


def url_secrets(url: str) -> tuple[str, ...]:
    """The secrets a URL carries: its password (as written and decoded, found as
    :func:`split_login` finds it) and the values of its credential query parameters."""
    found: list[str] = []
    address, _, password = split_login(url)
    if password:
        _, sep, rest = url.partition("://")
        written = (rest if sep else url).rpartition("@")[0].partition(":")[2]
        found += [written, password]
    _, question, query = address.partition("?")
    if question:
        for key, value in parse_qsl(query.split("#", 1)[0], keep_blank_values=False):
            if key.lower() in SECRET_PARAMETERS and value:
                found += [value, quote(value, safe="")]
    return tuple(found)


def redact_url(url: str) -> str:
    """``url`` as it may be shown: its password and credential parameters replaced."""
    return redact(url, url_secrets(url))
