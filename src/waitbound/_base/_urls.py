"""URLs: which ones waitbound will use, whose origin they have, and how they are logged.

httpx's own parser (``httpx.URL``) is the judge, so waitbound never accepts a URL that
httpx would later refuse, and both agree on what its origin is. On top of httpx's
rules: an absolute ``http``/``https`` URL with a host, no user info, and a port of
ASCII digits from 1 to 65535. (httpx reads a port of fullwidth digits, ``+80`` or
``1_0`` as a number; the standard library's ``urlsplit`` refuses them, and so does
waitbound.)
"""

from __future__ import annotations

import functools
import re
from typing import Final
from urllib.parse import urlsplit

import httpx

__all__ = [
    "checked_url",
    "origin",
    "origin_only",
    "redact_url",
    "resolve",
    "same_url",
    "shown_url",
    "url_without_userinfo",
]

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_QUOTE_CHARS: Final = 120


def _quoted(text: str, limit: int = _QUOTE_CHARS) -> str:
    """*text* for a message: ASCII only, control characters escaped, at most *limit* chars."""
    quoted = ascii(text[:limit])[1:-1]
    return quoted if len(text) <= limit else quoted + "..."


def _parsed(url: str) -> httpx.URL:
    """*url* (absolute or relative) parsed by httpx, its port checked as ASCII digits.

    Raises:
        ValueError: httpx refuses it, or its port is not plain digits in range.
    """
    try:
        parsed = httpx.URL(url)
        parsed.host  # noqa: B018 - an xn-- label is decoded (and may fail) only when read
    except (httpx.InvalidURL, ValueError, TypeError) as exc:  # idna errors are ValueErrors
        raise ValueError(f"httpx cannot use it: {_quoted(str(exc))}") from None
    try:
        urlsplit(url).port  # noqa: B018 - urllib checks the port only when it is read
    except ValueError as exc:
        if "port" not in str(exc).lower():
            raise ValueError(f"its authority cannot be read: {_quoted(str(exc))}") from None
        raise ValueError("the port must be ASCII digits from 1 to 65535") from None
    if parsed.port is not None and not 0 < parsed.port <= 65535:
        raise ValueError("the port must be ASCII digits from 1 to 65535")
    return parsed


@functools.lru_cache(maxsize=1024)
def checked_url(url: str) -> str:
    """Return *url* when waitbound and httpx can both use it (memoized: the same few
    URLs are checked on every step).

    The rules: httpx parses it (no control characters, CR/LF or spaces in the host, a
    valid IDNA host, ...); it is absolute ``http`` or ``https``; it has a host made of
    host characters; no user info; a port, when given, of ASCII digits in 1..65535.

    Returns:
        *url* unchanged (``httpx.URL(url)`` works and a request can be built with it).

    Raises:
        ValueError: it cannot be used; the message says why and quotes at most a
            bounded, ASCII-escaped part of it, never the whole raw URL.
    """
    parsed = _parsed(url)
    if parsed.scheme not in _DEFAULT_PORTS:
        raise ValueError("not an http or https URL")
    if not parsed.raw_host:
        raise ValueError("an http or https URL needs a host")
    if b"%" in parsed.raw_host:  # httpx escaped characters a host cannot have
        raise ValueError(f"a host with characters a host name cannot have: {_quoted(parsed.host)}")
    if parsed.userinfo:
        raise ValueError("credentials in a URL are not accepted; send them in a header")
    try:
        httpx.Request("GET", parsed)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise ValueError(f"httpx cannot send to it: {_quoted(str(exc))}") from None
    return url


_NOT_IN_A_REFERENCE: Final = re.compile(r"[\x00-\x20\"<>\\^`{|}\x7f]")
"""ASCII a URI reference never holds (RFC 3986 §2: space, controls, ``"<>\\^`{|}``);
characters beyond ASCII are IRI text (RFC 3987) that httpx encodes, and a stray ``%``
is left to httpx as before."""
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def _reference_problem(url: str) -> str | None:
    """Why *url* is not a URI reference a provider may name (RFC 3986 §4.1), or ``None``.

    httpx would percent-encode the characters a reference cannot hold (``not a url``
    becomes a path) and resolve ``http://`` (no host) to the base itself: a URL that
    names nowhere, polled as if it named something.
    """
    if (bad := _NOT_IN_A_REFERENCE.search(url)) is not None:
        return f"not a URI reference (RFC 3986): it holds the character {bad.group()!a}"
    if _SCHEME.match(url) and not re.match(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#]", url):
        return "a URL with a scheme needs a host (scheme://host/…)"
    return None


def resolve(base: str, url: str) -> str:
    """Resolve *url* against *base* the way httpx does (RFC 3986 §5), then check it.

    *url* must be a URI reference (RFC 3986 §4.1; characters beyond ASCII allowed as
    IRI text): a space, a control or another character a reference cannot hold, or a
    scheme without a host, is refused rather than escaped into a path that names
    nowhere.

    Returns:
        The joined URL in httpx's normal form (lower-case host, IDNA, escapes).

    Raises:
        ValueError: *base* or *url* cannot be parsed, *url* is not a URI reference,
            or the result is not usable (see :func:`checked_url`).
    """
    if (problem := _reference_problem(url)) is not None:
        raise ValueError(problem)
    joined = _parsed(base).join(_parsed(url))
    return checked_url(str(joined))


@functools.lru_cache(maxsize=1024)
def same_url(url: str | None, other: str | None) -> bool:
    """Whether two URLs name the same place once both are in httpx's normal form
    (a submit URL is stored as written: ``HTTPS://Host:443/x`` is ``https://host/x``);
    ``False`` when either is missing or is not a URL."""
    if not url or not other:
        return False
    try:
        return resolve(url, url) == resolve(other, other)
    except ValueError:
        return False


@functools.lru_cache(maxsize=1024)
def origin(url: str) -> tuple[str, str | None, int | None]:
    """The origin (scheme, host, port) of an http(s) URL, as httpx sees it (memoized:
    every request asks it of the same few URLs).

    The host is lower-case in IDNA (``xn--``) form, IPv6 without brackets; the port is
    defaulted (80 for http, 443 for https).

    Raises:
        ValueError: httpx cannot parse the URL, or its port is invalid.
    """
    parsed = _parsed(url)
    host = parsed.raw_host.decode("ascii").lower() or None
    return parsed.scheme, host, parsed.port or _DEFAULT_PORTS.get(parsed.scheme)


def redact_url(url: str) -> str:
    """The URL without user info or query string (which may carry credentials).

    Never raises. The result is ASCII (escaped where needed) and bounded: 2,000
    characters, or 200 for a URL httpx cannot parse, which is cut at ``?`` or ``#`` and
    loses anything before an ``@`` in its authority.
    """
    if not url:
        return ""
    try:
        parsed = httpx.URL(url)
        netloc = parsed.netloc.decode("ascii")
        path = parsed.raw_path.split(b"?", 1)[0].decode("ascii")
    except (httpx.InvalidURL, ValueError, TypeError):
        bare = re.split(r"[?#]", str(url), maxsplit=1)[0]
        return _quoted(re.sub(r"//[^/@]*@", "//", bare), 200)
    scheme = f"{parsed.scheme}:" if parsed.scheme else ""
    authority = f"//{netloc}" if netloc else ""
    return _quoted(f"{scheme}{authority}{path}", 2000) + ("?…" if parsed.query else "")


def url_without_userinfo(url: str) -> str:
    """The URL with its user info removed and everything else kept, its query included
    (for a URL a profile marks safe to show whole, e.g. ``errors_url_query_safe``).

    Never raises: a URL httpx cannot parse is shown as :func:`redact_url` shows it.
    """
    if not url:
        return ""
    try:
        parsed = httpx.URL(url)
        netloc = parsed.netloc.decode("ascii")
        path = parsed.raw_path.decode("ascii")
    except (httpx.InvalidURL, ValueError, TypeError):
        return redact_url(url)
    scheme = f"{parsed.scheme}:" if parsed.scheme else ""
    authority = f"//{netloc}" if netloc else ""
    whole = f"{scheme}{authority}{path}"
    return _quoted(whole, 2000) if len(whole) <= 2000 else redact_url(url)


def origin_only(url: str) -> str:
    """A URL that may carry a secret anywhere (a completion's target: a chat tool's
    incoming-webhook URL has its secret in the path) as output shows it: its scheme and
    authority without user info (``https://hooks.example:8443``), then ``/…`` when
    anything followed. The one function every output of a notify or webhook URL uses.

    Never raises: a URL httpx cannot parse is ``(a URL)``.
    """
    shown = redact_url(url)
    scheme, sep, rest = shown.partition("//")
    if not sep or not rest:
        return "(a URL)"
    authority, slash, path = rest.partition("/")
    authority = authority.removesuffix("?…")
    return f"{scheme}//{authority}" + ("/…" if (slash and path) or shown.endswith("?…") else "")


def shown_url(url: str) -> str:
    """A URL as a message quotes it: as written (not normalised), without user info or
    query, control and non-ASCII characters escaped, at most 200 characters, in quotes."""
    bare, *rest = re.split(r"[?#]", str(url), maxsplit=1)
    shown = _quoted(re.sub(r"//[^/@]*@", "//", bare), 200)
    return f"'{shown}'" + ("?..." if rest else "")
