"""HTTP body compression as Triton does it for infer requests and responses.

Requests: ``Content-Encoding: gzip`` or ``deflate`` (zlib format, as ``tritonclient`` sends it)
is decompressed, anything else but ``identity`` is refused (``UNSUPPORTED``, with
``Accept-Encoding: gzip, deflate`` in the reply). Responses: compressed with the encoding of
highest weight among identity/gzip/deflate in ``Accept-Encoding`` (``CompressionTypeUsed``).
"""

from __future__ import annotations

import zlib

from workbench.errors import InvalidArgumentError, UnsupportedError

_WBITS = {"gzip": 31, "deflate": 15}
_KNOWN = ("identity", "gzip", "deflate")
SUPPORTED_ENCODINGS = b"gzip, deflate"


def decompress(
    body: bytes | bytearray | memoryview, encoding: bytes | None, max_bytes: int
) -> bytes | bytearray | memoryview:
    """The decoded request body; at most ``max_bytes`` (Triton's ``--http-max-input-size``)."""
    name = (encoding or b"").decode("latin-1").strip()
    if name in ("", "identity"):
        return body
    if name not in _WBITS:
        raise UnsupportedError("Unsupported compression type")
    decoder = zlib.decompressobj(wbits=_WBITS[name])
    try:
        data = decoder.decompress(body, max_bytes)
        if decoder.unconsumed_tail:
            raise InvalidArgumentError(
                f"Decompressed data size exceeds the maximum allowed value of {max_bytes} bytes. "
                "Use --http-max-input-size to increase the limit."
            )
        data += decoder.flush()
    except zlib.error as exc:
        raise InvalidArgumentError(f"failed to decompress the request body: {exc}") from None
    return data


def response_encoding(accept_encoding: bytes | None) -> str:
    """identity, gzip or deflate: the accepted encoding of highest weight."""
    if not accept_encoding:
        return "identity"
    chosen, weight = "identity", 0.0
    for item in accept_encoding.decode("latin-1").split(","):
        name, _, q = item.strip().partition(";q=")
        try:
            item_weight = float(q) if q else 1.0
        except ValueError:
            continue
        if name in _KNOWN and item_weight > weight:
            chosen, weight = name, item_weight
    return chosen


def compress(body: bytes, encoding: str) -> bytes:
    """``body`` in ``encoding`` (gzip or deflate; identity returns it unchanged)."""
    if encoding not in _WBITS:
        return body
    encoder = zlib.compressobj(wbits=_WBITS[encoding])
    return encoder.compress(body) + encoder.flush()


__all__ = ["SUPPORTED_ENCODINGS", "compress", "decompress", "response_encoding"]
