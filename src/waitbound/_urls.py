"""URLs: which ones waitbound will use, whose origin they have, and how they are logged."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

__all__ = ["checked_url", "origin", "redact_url", "resolve", "shown_url"]


def checked_url(url: str) -> str:
    """Return *url* when it is an absolute http(s) URL with a host and a valid port.

    Raises:
        ValueError: it is not (the message says why).
    """
    parts = urlsplit(url)
    parts.port  # noqa: B018 - urllib checks the port only when it is read
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("not an http or https URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError("credentials in a URL are not accepted; send them in a header")
    return url


def resolve(base: str, url: str) -> str:
    """Resolve *url* against *base*, then check it (see :func:`checked_url`).

    Raises:
        ValueError: the result is not a usable http(s) URL.
    """
    return checked_url(urljoin(base, url))


def origin(url: str) -> tuple[str, str | None, int | None]:
    """The origin (scheme, host, port) of an http(s) URL, the port defaulted.

    Raises:
        ValueError: the URL's port is invalid.
    """
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, parts.hostname, parts.port or default


def redact_url(url: str) -> str:
    """The URL without user info or query string (which may carry credentials)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # still drop what may be credentials: user info and the query
        return re.sub(r"//[^/@]*@", "//", re.split(r"[?#]", url, maxsplit=1)[0])[:200]
    host = parts.hostname or ""
    if port:
        host = f"{host}:{port}"
    return f"{parts.scheme}://{host}{parts.path}" + ("?…" if parts.query else "")


def shown_url(url: str) -> str:
    """A URL as a message may quote it: without user info or query, control and
    non-ASCII characters escaped, at most 200 characters, in quotes."""
    return ascii(redact_url(url)[:200])
