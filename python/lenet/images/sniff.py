"""What an encoded image is, read from its first bytes without decoding it: its format
and size (decoded only when the size is within the limit), a PNG's chunk lengths, and
an EXIF block's orientation."""

from __future__ import annotations

import struct
from typing import Optional

from ..errors import InputError


def image_size(data: bytes, source: str = "<bytes>") -> tuple[str, int, int]:
    """(format, width, height) read from the header of an encoded image, without
    decoding it. Raises InputError for a format lenet does not decode (see the module
    docstring) or a header too short or malformed to give a size."""
    try:
        found = _header_size(data)
    except (struct.error, IndexError, ValueError, OverflowError):  # offsets past the end, bad numbers
        found = None
    if found is None:
        fmt = format_of(data)
        if fmt is None:
            raise InputError(f"{source}: not an image lenet decodes (PNG, JPEG, BMP, GIF, WebP, TIFF, PNM)")
        raise InputError(f"{source}: a {fmt} file whose header gives no image size (truncated or corrupt)")
    return found


def check_png_chunks(d: bytes, source: str) -> bool:
    """Refuses a PNG with a chunk longer than the data left: OpenCV 5.0 allocates (and
    zero-fills) the declared length first, so 4 bytes of 0xff cost 4 GB and seconds
    (found by tests/fuzz_targets.py image-bytes). Returns whether the PNG has an eXIf
    chunk (an EXIF orientation to apply)."""
    pos, exif = 8, False
    while pos + 8 <= len(d):
        (length,) = struct.unpack_from(">I", d, pos)
        kind = d[pos + 4 : pos + 8]
        if length > len(d) - pos - 12:
            raise InputError(
                f"{source}: a corrupt or truncated PNG: chunk {kind!r} at byte {pos} declares "
                f"{length:,} bytes, {max(0, len(d) - pos - 12):,} remain"
            )
        exif = exif or kind == b"eXIf"
        pos += 12 + length
        if kind == b"IEND":
            break
    return exif


def split_images(data: bytes) -> list[bytes]:
    """Encoded images written one after another (``cat a.png b.jpg``), each whole: PNG, JPEG,
    BMP and WebP say where they end; anything after an image in another format, or after one
    whose end cannot be found, stays with it (one image, as it was given)."""
    parts = []
    while data:
        try:
            n = _encoded_length(data)
        except (struct.error, IndexError, ValueError):  # a header cut short
            n = None
        if n is None or n >= len(data):
            parts.append(data)
            break
        parts.append(data[:n])
        data = data[n:]
    return parts


def _encoded_length(d: bytes) -> Optional[int]:
    """The length of the encoded image at the start of d, or None when its format does not say."""
    fmt = format_of(d)
    if fmt == "PNG":
        pos = 8
        while pos + 12 <= len(d):
            (length,) = struct.unpack_from(">I", d, pos)
            end = pos + 12 + length
            if d[pos + 4 : pos + 8] == b"IEND":
                return end
            pos = end
        return None
    if fmt == "JPEG":
        return _jpeg_length(d)
    if fmt == "WebP":
        (size,) = struct.unpack_from("<I", d, 4)
        return 8 + size + (size & 1)
    if fmt == "BMP":
        (size,) = struct.unpack_from("<I", d, 2)
        return size if size >= 26 else None  # some writers leave it 0
    return None


def _jpeg_length(d: bytes) -> Optional[int]:
    """The end of a JPEG's EOI marker, its segments walked by their lengths (so an EXIF
    thumbnail's markers, inside APP1, are skipped) and each scan's entropy-coded data to
    the first marker that is neither a stuffed 0xFF00 nor a restart."""
    pos, n = 2, len(d)
    while pos + 1 < n:
        if d[pos] != 0xFF:
            return None
        marker = d[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0xD9:  # EOI
            return pos + 2
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # no length
            pos += 2
            continue
        (length,) = struct.unpack_from(">H", d, pos + 2)
        pos += 2 + length
        if marker == 0xDA:  # start of scan: entropy-coded data to the next real marker
            while True:
                pos = d.find(b"\xff", pos)
                if pos < 0 or pos + 1 >= n:
                    return None
                following = d[pos + 1]
                if following == 0x00 or 0xD0 <= following <= 0xD7 or following == 0xFF:
                    pos += 1 if following == 0xFF else 2
                    continue
                break
    return None


def format_of(d: bytes) -> Optional[str]:
    if d[:8] == b"\x89PNG\r\n\x1a\n":
        return "PNG"
    if d[:2] == b"\xff\xd8":
        return "JPEG"
    if d[:2] == b"BM":
        return "BMP"
    if d[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if d[:4] == b"RIFF" and d[8:12] == b"WEBP":
        return "WebP"
    if d[:4] in (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+"):
        return "TIFF"
    if len(d) >= 2 and d[:1] == b"P" and d[1:2] in b"1234567":
        return "PNM"
    return None


def _header_size(d: bytes) -> Optional[tuple[str, int, int]]:
    fmt = format_of(d)
    if fmt == "PNG":  # IHDR first: width, height (big-endian u32)
        if d[12:16] != b"IHDR":
            return None
        w, h = struct.unpack_from(">II", d, 16)
        return fmt, w, h
    if fmt == "JPEG":  # the first start-of-frame segment: height, width (big-endian u16)
        i = 2
        while i + 4 <= len(d):
            if d[i] != 0xFF:
                return None
            marker = d[i + 1]
            if marker == 0xFF:  # fill byte
                i += 1
                continue
            if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:  # no length
                i += 2
                continue
            if marker in (0xD9, 0xDA):  # end of image, start of scan before any frame
                return None
            (length,) = struct.unpack_from(">H", d, i + 2)
            if length < 2:
                return None
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                h, w = struct.unpack_from(">HH", d, i + 5)
                return fmt, w, h
            i += 2 + length
        return None
    if fmt == "BMP":
        (header,) = struct.unpack_from("<I", d, 14)
        if header == 12:  # OS/2 BITMAPCOREHEADER
            w, h = struct.unpack_from("<HH", d, 18)
        else:
            w, h = struct.unpack_from("<ii", d, 18)
        return fmt, w, abs(h)
    if fmt == "GIF":  # logical screen
        w, h = struct.unpack_from("<HH", d, 6)
        return fmt, w, h
    if fmt == "WebP":
        chunk = d[12:16]
        if chunk == b"VP8X":  # canvas size - 1, 24-bit little-endian
            return fmt, 1 + int.from_bytes(d[24:27], "little"), 1 + int.from_bytes(d[27:30], "little")
        if chunk == b"VP8L" and d[20] == 0x2F:  # 14-bit width - 1, 14-bit height - 1
            (bits,) = struct.unpack_from("<I", d, 21)
            return fmt, 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
        if chunk == b"VP8 " and d[23:26] == b"\x9d\x01\x2a":
            w, h = struct.unpack_from("<HH", d, 26)
            return fmt, w & 0x3FFF, h & 0x3FFF
        return None
    if fmt == "TIFF":  # the first directory's ImageWidth (256) and ImageLength (257)
        order = "<" if d[:2] == b"II" else ">"
        big = d[2:4] in (b"+\0", b"\0+")
        if big:
            (ifd,) = struct.unpack_from(order + "Q", d, 8)
            (n,) = struct.unpack_from(order + "Q", d, ifd)
            first, size, entry = ifd + 8, 20, order + "HHQ"
        else:
            (ifd,) = struct.unpack_from(order + "I", d, 4)
            (n,) = struct.unpack_from(order + "H", d, ifd)
            first, size, entry = ifd + 2, 12, order + "HHI"
        dims = {}
        for k in range(min(n, 4096)):
            at = first + k * size
            tag, kind, _ = struct.unpack_from(entry, d, at)
            value_at = at + (12 if big else 8)
            if tag in (256, 257):
                if kind == 3:
                    (dims[tag],) = struct.unpack_from(order + "H", d, value_at)
                elif kind == 4:
                    (dims[tag],) = struct.unpack_from(order + "I", d, value_at)
                elif kind == 16 and big:
                    (dims[tag],) = struct.unpack_from(order + "Q", d, value_at)
                else:
                    return None
        if 256 in dims and 257 in dims:
            return fmt, dims[256], dims[257]
        return None
    if fmt == "PNM":  # P1-P6: width and height after the magic; P7 (PAM): WIDTH / HEIGHT lines
        head = d[:4096].split(b"\n")
        if d[1:2] == b"7":
            fields = {}
            for line in head[1:]:
                parts = line.split()
                if parts and parts[0] in (b"WIDTH", b"HEIGHT") and len(parts) > 1:
                    fields[parts[0]] = int(parts[1])
                if parts[:1] == [b"ENDHDR"]:
                    break
            if b"WIDTH" in fields and b"HEIGHT" in fields:
                return fmt, fields[b"WIDTH"], fields[b"HEIGHT"]
            return None
        tokens = []
        for line in head:
            tokens += line.split(b"#", 1)[0].split()
            if len(tokens) >= 3:
                return fmt, int(tokens[1]), int(tokens[2])
        return None
    return None


def exif_orientation(tiff: bytes) -> int:
    """The orientation tag (1..8) of an EXIF block (a TIFF header and its first
    directory); 1 when absent or unreadable."""
    order = {b"II": "<", b"MM": ">"}.get(tiff[:2])
    try:
        (ifd,) = struct.unpack_from(order + "I", tiff, 4)
        (n,) = struct.unpack_from(order + "H", tiff, ifd)
        for i in range(n):
            tag, kind, _, value = struct.unpack_from(order + "HHIH", tiff, ifd + 2 + 12 * i)
            if tag == 0x0112 and kind == 3 and 1 <= value <= 8:  # SHORT
                return value
    except (TypeError, struct.error):  # not TIFF (order None), or truncated
        pass
    return 1
