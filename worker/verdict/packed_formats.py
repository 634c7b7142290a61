"""The compressed streams inside a PNG or a PDF, unpacked for the secret scan.

A secret written into a PNG's text chunks or image data, or into a PDF's content, is stored
deflated: the plain and encoded searches never see it. These are walked by their documented
structure (PNG: length, type, data, CRC chunks; PDF: `stream` ... `endstream` with the
dictionary before it naming its filters), not decoded as images or documents: image rows are
scanned as PNG stores them (after their filter byte), PDF text as its content stream writes it.
What cannot be unpacked raises ValueError (or zlib.error), and the scan refuses the file.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterator

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PDF_MAGIC = b"%PDF-"
PDF_MAGIC_WITHIN = 1024  # readers accept the header anywhere in the first 1 KiB
# The PNG chunks whose data is a zlib stream after a keyword and a method byte.
PNG_KEYWORD_CHUNKS = (b"zTXt", b"iCCP")
# `stream` followed by its end of line, and not the end of an `endstream`.
PDF_STREAM_RE = re.compile(rb"(?<!end)stream(?:\r\n|\n|\r)")
PDF_FILTER_RE = re.compile(rb"/Filter\s*(\[[^\]]*\]|/[^\s/\[\]<>()]+)")
PDF_NAME_RE = re.compile(rb"/([^\s/\[\]<>()]+)")
# How far before `stream` its dictionary is looked for.
PDF_DICT_WINDOW = 4096
PDF_FLATE = {"FlateDecode", "Fl"}
# Image codecs: their bytes are scanned as stored, like any other binary file's.
PDF_IMAGE_CODECS = {"DCTDecode", "DCT", "JPXDecode", "CCITTFaxDecode", "CCF", "JBIG2Decode"}


class UnscannableStream(ValueError):
    """A stream the scan cannot undo; the message says which (for the refusal)."""


def packed_streams(data: bytes, limit: int) -> Iterator[bytes]:
    """Every compressed stream inside a PNG or PDF, unpacked (each at most limit + 1 bytes,
    so the caller sees one too large); nothing for other files."""
    if data.startswith(PNG_MAGIC):
        yield from _png(data, limit)
    elif PDF_MAGIC in data[:PDF_MAGIC_WITHIN]:
        yield from _pdf(data, limit)


def inflate(data: bytes, limit: int) -> bytes:
    """A whole zlib stream's contents; ValueError if it ends early, zlib.error if it is not one."""
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, limit + 1)
    if len(out) <= limit and not inflater.eof:
        raise ValueError("the zlib stream ends early")
    return out


def _png(data: bytes, limit: int) -> Iterator[bytes]:
    image: list[bytes] = []  # IDAT, then each animation frame's fdAT: one zlib stream each
    frames: list[list[bytes]] = []
    for kind, body in _png_chunks(data):
        if kind == b"IDAT":
            image.append(body)
        elif kind == b"fcTL":
            frames.append([])
        elif kind == b"fdAT" and frames:
            frames[-1].append(body[4:])  # after its sequence number
        elif kind in PNG_KEYWORD_CHUNKS:
            _keyword, _, rest = body.partition(b"\0")
            yield inflate(rest[1:], limit)
        elif kind == b"iTXt":
            _keyword, _, rest = body.partition(b"\0")
            if rest[:1] == b"\1":  # compressed; then method, language and translated keyword
                yield inflate(rest[2:].split(b"\0", 2)[-1], limit)
    for stream in (image, *frames):
        if stream:
            yield inflate(b"".join(stream), limit)


def _png_chunks(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    position = len(PNG_MAGIC)
    while position < len(data):
        if position + 8 > len(data):
            raise ValueError("a PNG chunk is cut short")
        length, kind = struct.unpack_from(">I4s", data, position)
        body = data[position + 8 : position + 8 + length]
        if len(body) < length:
            raise ValueError("a PNG chunk is cut short")
        yield kind, body
        position += 12 + length
        if kind == b"IEND":
            return


def _pdf(data: bytes, limit: int) -> Iterator[bytes]:
    position = 0
    # From one stream's end to the next `stream`: a stream's own bytes are never searched
    # for the keyword (deflated data may hold it by chance).
    while match := PDF_STREAM_RE.search(data, position):
        end = data.find(b"endstream", match.end())
        if end < 0:
            raise ValueError("a PDF stream has no end")
        position = end + len(b"endstream")
        filters = _pdf_filters(data[max(0, match.start() - PDF_DICT_WINDOW) : match.start()])
        if not filters or set(filters) <= PDF_IMAGE_CODECS:
            continue  # stored as is: the file's own bytes were scanned
        if set(filters) <= PDF_FLATE and len(filters) == 1:
            yield inflate(data[match.end() : end], limit)
            continue
        other = next((f for f in filters if f not in PDF_FLATE), filters[0])
        raise UnscannableStream(f"a PDF stream filtered with /{other}, which the scan cannot undo")


def _pdf_filters(before: bytes) -> list[str]:
    """The filter names of the dictionary just before a `stream` keyword."""
    start = before.rfind(b" obj")
    found = PDF_FILTER_RE.search(before[start + 1 :] if start >= 0 else before)
    if found is None:
        return []
    return [name.decode("latin-1") for name in PDF_NAME_RE.findall(found.group(1))]
