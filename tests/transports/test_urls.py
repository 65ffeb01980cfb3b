"""URLs judged by httpx's own parser: waitbound never accepts one httpx later refuses."""

from __future__ import annotations

import httpx
import pytest

from waitbound._base._urls import checked_url, origin, redact_url, resolve

HOSTILE = [
    "http://☃.net/status",
    "http://xn--n3h.net/status",
    "http://a\nb.test/",
    "http://provider.test/status\r\nX-Injected: 1",
    "http://provider.test/\x00",
    "http://provider.test/\x7f",
    "http://①②⑦.0.0.1/",
    "http://provider.test:\uff18\uff10/status",
    "http://provider.test:80\u0660/status",
    "http://provider.test:+80/",
    "http://provider.test: 80/",
    "http://provider.test:-1/",
    "http://provider.test:1_0/",
    "http://provider.test:0/",
    "http://provider.test:99999/",
    "http://provider.test:0x50/",
    "http:///status",
    "http://",
    "http://[::1/x",
    "http://a b.test/",
    "http://u:p@provider.test/",
    "http://provider.test\\@evil.test/",
    "http://provider.test\uff0fx/",
    "http://a\u2100b.test/",
    "ftp://provider.test/",
    "javascript:alert(1)",
    "//provider.test/status",
    " http://provider.test/",
    "http://" + "a" * 70 + ".test/",
    "",
    # usable ones: they must come back usable
    "http://provider.test/status",
    "HTTP://Provider.TEST:80/status",
    "http://münchen.test/status",
    "http://provider.test/a b?q=☃",
    "http://[::1]:8080/status",
    "https://127.0.0.1:8443/status",
]


@pytest.mark.parametrize("url", HOSTILE, ids=[ascii(url)[:40] for url in HOSTILE])
def test_a_checked_url_is_refused_or_usable_by_httpx_never_in_between(url: str) -> None:
    """checked_url raises ValueError, or httpx parses the result and builds a request with it."""
    try:
        result = checked_url(url)
    except ValueError as exc:
        message = str(exc)
        assert message.isascii()
        assert "\n" not in message
        assert "\r" not in message
        assert len(message) < 250
        return
    parsed = httpx.URL(result)
    assert parsed.scheme in ("http", "https")
    assert parsed.host
    request = httpx.Request("GET", parsed)
    assert request.url.host == parsed.host


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://☃.net/status", "IDNA"),
        ("http://a\nb.test/", "non-printable"),
        ("http://provider.test:\uff18\uff10/", "port"),
        ("http://provider.test:99999/", "port"),
        ("http:///status", "host"),
        ("ftp://provider.test/", "http or https"),
        ("http://u:p@provider.test/", "credentials"),
        ("http://a b.test/", "host"),
    ],
)
def test_a_refused_url_says_why(url: str, words: str) -> None:
    """The ValueError names the rule the URL breaks."""
    with pytest.raises(ValueError, match=words):
        checked_url(url)


def test_a_refusal_never_quotes_the_whole_raw_url() -> None:
    """A long hostile URL is quoted bounded and ASCII-escaped, never in full."""
    url = "http://☃" + "x" * 500 + ".net/status?token=abc"
    with pytest.raises(ValueError, match="IDNA") as caught:
        checked_url(url)
    message = str(caught.value)
    assert message.isascii()
    assert url not in message
    assert "token=abc" not in message
    assert len(message) < 250


@pytest.mark.parametrize(
    ("base", "url", "joined"),
    [
        ("http://provider.test/v1/status", "../v2/x", "http://provider.test/v2/x"),
        ("http://provider.test/v1/status", "?page=2", "http://provider.test/v1/status?page=2"),
        ("http://provider.test/v1/status", "//Other.TEST/x", "http://other.test/x"),
        ("http://provider.test/status", "https://files.test/out", "https://files.test/out"),
        ("http://provider.test/status", "/ä", "http://provider.test/%C3%A4"),
    ],
)
def test_resolve_joins_the_way_httpx_does(base: str, url: str, joined: str) -> None:
    """resolve(base, url) is httpx.URL(base).join(url), checked."""
    assert resolve(base, url) == joined == str(httpx.URL(base).join(url))


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:99999/x",
        "//other.test:\uff18\uff10/x",
        "http://☃.net/",
        "\r\n",
        "ftp://x.test/",
        "/a b",
        "not a url",
        "http://",
        "https:/x",
        "<http://provider.test/x>",
    ],
)
def test_resolve_refuses_a_reference_httpx_or_waitbound_cannot_use(url: str) -> None:
    """A redirect or result URL that cannot be used is a ValueError, not an httpx error later;
    so is a value that is no URI reference (RFC 3986: a space, `<>`...) or a scheme without a
    host, which httpx would escape into a path or resolve to the base itself."""
    with pytest.raises(ValueError):  # noqa: PT011 - the message varies by rule
        resolve("http://provider.test/status", url)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://Provider.TEST/status", ("http", "provider.test", 80)),
        ("https://provider.test/status", ("https", "provider.test", 443)),
        ("http://provider.test:8080/", ("http", "provider.test", 8080)),
        ("http://münchen.test/", ("http", "xn--mnchen-3ya.test", 80)),
        ("http://xn--mnchen-3ya.test/", ("http", "xn--mnchen-3ya.test", 80)),
        ("http://[::1]:8080/", ("http", "::1", 8080)),
        ("http://a\u3002test/", ("http", "a.test", 80)),
    ],
)
def test_origin_agrees_with_httpx(url: str, expected: tuple[str, str, int]) -> None:
    """The origin is httpx's: lower-case IDNA host, default port filled in."""
    assert origin(url) == expected
    parsed = httpx.URL(url)
    assert expected[1] == parsed.raw_host.decode()


@pytest.mark.parametrize("url", HOSTILE, ids=[ascii(url)[:40] for url in HOSTILE])
def test_redact_url_never_raises_and_is_ascii(url: str) -> None:
    """Any string gives an ASCII, single-line, bounded rendering."""
    shown = redact_url(url)
    assert shown.replace("…", "").isascii()
    assert "\n" not in shown
    assert "\r" not in shown
    assert len(shown) <= 2002


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://u:p@provider.test/x?token=abc#f", "http://provider.test/x?…"),
        ("http://☃.net/s?token=abc", "http://\\u2603.net/s"),
        ("http://u:p@☃.net/s", "http://\\u2603.net/s"),
        ("https://provider.test/status", "https://provider.test/status"),
    ],
)
def test_redact_url_drops_user_info_and_the_query(url: str, shown: str) -> None:
    """What may carry credentials (user info, query) never shows."""
    assert redact_url(url) == shown
