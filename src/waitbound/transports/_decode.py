"""Decoding a response body's ``Content-Encoding`` here, bounded (``transports._http``).

Only identity, gzip and deflate are accepted (what ``ACCEPT_ENCODING`` offers), and
never more decoded bytes exist than the caller has room for: a gzip bomb stops at the
body cap.
"""

from __future__ import annotations

import zlib
from typing import Final

__all__ = ["Decoder"]

_IDENTITY: Final = frozenset({"", "identity"})
_WBITS: Final = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS}


class Decoder:
    """Decode one response body's ``Content-Encoding``, never more than asked for.

    Identity passes through; gzip and deflate (zlib-wrapped, or raw as some servers
    send it) go through ``zlib.decompressobj`` with ``max_length``.
    """

    def __init__(self, content_encoding: str) -> None:
        """Prepare for *content_encoding* (the header's value).

        Raises:
            ValueError: a coding other than identity, gzip or deflate, or more than one.
        """
        codings = [c.strip().lower() for c in content_encoding.split(",")]
        codings = [c for c in codings if c not in _IDENTITY]
        if len(codings) > 1 or (codings and codings[0] not in (*_WBITS, "deflate")):
            shown = ascii(content_encoding[:40])
            raise ValueError(f"a body with an unsupported Content-Encoding ({shown})")
        self.coding = codings[0] if codings else None
        self._zlib = None if self.coding is None else self._start()
        self._fed = bytearray()  # deflate: the first bytes, in case they are raw deflate
        self._decided = self.coding != "deflate"

    def _start(self, *, raw_deflate: bool = False) -> zlib._Decompress:
        if self.coding == "deflate":
            return zlib.decompressobj(-zlib.MAX_WBITS if raw_deflate else zlib.MAX_WBITS)
        return zlib.decompressobj(_WBITS[str(self.coding)])

    def decode(self, raw: bytes, room: int) -> bytes:
        """At most *room* (``>= 1``) decoded bytes of the next raw chunk.

        Raises:
            ValueError: the compressed data is damaged.
        """
        if self._zlib is None:
            return raw[:room]
        try:
            if not self._decided:
                return self._decode_first(raw, room)
            return self._zlib.decompress(raw, room)
        except zlib.error:
            raise ValueError(f"a {self.coding} body that cannot be decoded") from None

    def _decode_first(self, raw: bytes, room: int) -> bytes:
        """Deflate's first bytes: zlib-wrapped (RFC 9110), else raw deflate (RFC 1951)."""
        assert self._zlib is not None
        self._fed += raw
        try:
            out = self._zlib.decompress(raw, room)
        except zlib.error:
            self._zlib = self._start(raw_deflate=True)
            out = self._zlib.decompress(bytes(self._fed), room)
            self._decided = True
        if out or len(self._fed) >= 2:  # the two-byte zlib header was accepted
            self._decided = True
        if self._decided:
            self._fed.clear()
        return out

    def finish(self, received: bool) -> None:
        """Check the compressed body ended where it should.

        Raises:
            ValueError: a compressed body was cut short.
        """
        if self._zlib is not None and received and not self._zlib.eof:
            raise ValueError(f"a {self.coding} body cut short")
