"""Checks of an HDF5 file's bytes before libhdf5 opens it.

libhdf5 (1.14.6, the one h5py bundles) trusts several counts and links it reads
from a file: one changed byte can make it loop forever, or allocate and fill
gigabytes before it finds that the data is not there. The model-bytes fuzzer
(tests/fuzz_targets.py) and a scan of every single-byte change of the fuzzer's seed
files found these, each refused here by a ``ModelFileError`` naming the byte:

* a global heap collection ("GCOL", where variable-length strings such as Keras'
  attributes live) whose free-space object has size 0: an endless loop;
* a variable-length value that claims to be longer than the heap object it points
  to (libhdf5 allocates and fills the claimed length first), or an attribute string
  that claims more bytes than the file holds (its heap address broken too);
* a local heap ("HEAP", the link names of an old-style group, which is what h5py
  and Keras write) whose free list loops: libhdf5 allocates a list node per step,
  until memory runs out.

The structures are found by their signatures (libhdf5 checks the signature of each
one it reads, so every one it will read is among them) and parsed as the HDF5 file
format specification lays them out. Addresses and lengths are 8 bytes in every
file h5py writes; a file that says otherwise is refused, so that no structure can be
read by libhdf5 with a layout these checks did not use.
"""

from __future__ import annotations

from typing import Any, Optional

from ..errors import ModelFileError

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
# A variable-length value larger than this is checked against the heap object it
# points to (a smaller lie costs nothing; other bytes can look like a reference).
VLEN_CHECKED_BYTES = 1 << 20
# The attributes the loader reads that Keras writes as variable-length strings (the
# list attributes also in numbered chunks: layer_names0, layer_names1, ...).
VLEN_ATTRIBUTES = (b"backend", b"keras_version", b"model_config", b"training_config", b"layer_names", b"weight_names")
_FREE_NULL = 1  # the end of a local heap's free list


def check(buf: Any, name: Any, max_values: int) -> None:
    """Raise ModelFileError if the HDF5 file in ``buf`` (bytes or an mmap) holds a
    structure that libhdf5 would loop on or allocate gigabytes for. ``max_values``:
    the most values the loader reads from one attribute (more are refused before
    they are read, so they need no check here)."""
    with memoryview(buf) as data:  # released before an mmap is closed
        base = superblock(data)  # addresses count from it
        if base is None:  # not HDF5: libhdf5 refuses it unread
            return
        _check_superblock(data, base, name)
        collections = _check_global_heaps(buf, data, name)
        _check_heap_references(buf, data, base, collections, name)
        _check_vlen_attributes(buf, data, name, max_values)
        _check_local_heaps(buf, data, base, name)


def _u(data: memoryview, at: int, n: int = 8) -> int:
    return int.from_bytes(data[at : at + n], "little")


def superblock(data: memoryview) -> Optional[int]:
    """Where libhdf5 finds the superblock: the signature at byte 0, 512, 1024, 2048,
    ... (after a user block); None when it is nowhere."""
    at = 0
    while at + 8 <= len(data):
        if data[at : at + 8] == HDF5_MAGIC:
            return at
        at = 512 if at == 0 else 2 * at
    return None


def _check_superblock(data: memoryview, base: int, name: Any) -> None:
    """Addresses and lengths of 8 bytes (superblock versions 0-1: bytes 13 and 14;
    2-3: bytes 9 and 10). A truncated superblock is libhdf5's to refuse."""
    if base + 15 > len(data):
        return
    at = base + (13 if data[base + 8] < 2 else 9)
    if (data[at], data[at + 1]) != (8, 8):
        raise ModelFileError(
            f"{name}: HDF5 file with {data[at]}-byte addresses and {data[at + 1]}-byte lengths: "
            "lenet reads files with 8-byte ones (all that h5py and Keras write)"
        )


def _check_global_heaps(buf: Any, data: memoryview, name: Any) -> list:
    """Walks each collection as libhdf5 does (H5HG__cache_heap_deserialize) and
    requires every object to fit; returns [(file offset, {object index: size})] of
    the well-formed collections."""
    size = len(data)
    collections = []
    pos = buf.find(b"GCOL")
    while pos != -1:
        # signature, version 1, 3 reserved bytes, collection size (8 bytes)
        if pos + 16 <= size and data[pos + 4] == 1:
            csize = _u(data, pos + 8)
            if 4096 <= csize <= size - pos:
                p, end, objects = pos + 16, pos + csize, {}
                while p < end:
                    if p + 16 > end:  # too small for an object header: free space
                        break
                    idx, osize = _u(data, p, 2), _u(data, p + 8)
                    need = osize if idx == 0 else 16 + ((osize + 7) // 8) * 8
                    if need <= 0 or need > end - p:
                        raise ModelFileError(
                            f"{name}: corrupt HDF5 file: a global heap object at byte {p} does not fit its collection"
                        )
                    if idx:
                        objects[idx] = osize
                    p += need
                collections.append((pos, objects))
        pos = buf.find(b"GCOL", pos + 4)
    return collections


def _check_heap_references(buf: Any, data: memoryview, base: int, collections: list, name: Any) -> None:
    """A variable-length value on disk is (length: 4 bytes, collection address: 8,
    object index: 4); libhdf5 allocates and fills `length` bytes before it compares
    them with the object. Only references to an existing object with a length over
    VLEN_CHECKED_BYTES count: other bytes (text followed by zero padding) can look
    like an address."""
    for pos, objects in collections:
        address = (pos - base).to_bytes(8, "little")
        q = buf.find(address, 4)
        while q != -1:
            if q + 12 <= len(data):
                length, index = _u(data, q - 4, 4), _u(data, q + 8, 4)
                # A virtual dataset's layout message (version 4, class 3) references the
                # heap without a length: it is refused later, by name.
                virtual = data[q - 2] == 4 and data[q - 1] == 3
                if index in objects and length > max(objects[index], VLEN_CHECKED_BYTES) and not virtual:
                    raise ModelFileError(
                        f"{name}: corrupt HDF5 file: a variable-length value at byte {q - 4} claims {length:,} "
                        f"bytes; the heap object it points to holds {objects[index]:,}"
                    )
            q = buf.find(address, q + 1)


def _check_vlen_attributes(buf: Any, data: memoryview, name: Any, max_values: int) -> None:
    """The attribute messages of the names the loader reads: each variable-length
    string value's length must fit in the file (libhdf5 allocates and fills that
    length before it follows the value's heap address, which may be broken too)."""
    size = len(data)
    for attr in VLEN_ATTRIBUTES:
        at = buf.find(attr)
        while at != -1:
            end = at + len(attr)
            while end < size and 0x30 <= data[end] <= 0x39:  # chunk number
                end += 1
            if end < size and data[end] == 0:
                for header in (8, 9):  # the name follows 8 bytes (v1, v2), 9 (v3)
                    for offset, count in _vlen_values(data, at - header, end + 1 - at, header, max_values):
                        for k in range(count):
                            length = _u(data, offset + 16 * k, 4)
                            if length > size:
                                raise ModelFileError(
                                    f"{name}: corrupt HDF5 file: attribute {bytes(data[at:end]).decode()!r} "
                                    f"claims a {length:,}-byte string in a {size:,}-byte file"
                                )
            at = buf.find(attr, at + 1)


def _vlen_values(data: memoryview, start: int, name_size: int, header: int, max_values: int) -> list:
    """[(offset, count)] of the variable-length string values of the attribute message
    at `start` whose name is `name_size` bytes (NUL included), or [] when the bytes
    there are not such a message (attribute message versions 1-3)."""
    if start < 0 or start + 9 > len(data):
        return []
    version = data[start]
    if version not in ((1, 2) if header == 8 else (3,)) or _u(data, start + 2, 2) != name_size:
        return []
    if version == 3 and data[start + 8] not in (0, 1):  # the name's character set: ASCII, UTF-8
        return []
    tsize, ssize = _u(data, start + 4, 2), _u(data, start + 6, 2)
    pad = (lambda n: (n + 7) // 8 * 8) if version == 1 else (lambda n: n)
    t = start + (9 if version == 3 else 8) + pad(name_size)
    sp = t + pad(tsize)
    values = sp + pad(ssize)
    if values > len(data) or tsize < 8 or data[t] & 0x0F != 9 or data[t + 1] & 0x0F != 1:
        return []  # not a VLEN string
    # dataspace: v1 (version, rank, flags, 5 reserved) or v2 (version, rank, flags, type)
    sversion, rank = data[sp], data[sp + 1]
    dims = sp + (8 if sversion == 1 else 4)
    if sversion not in (1, 2) or rank > 32 or dims + 8 * rank > len(data):
        return []
    count = 1
    for r in range(rank):
        count *= _u(data, dims + 8 * r)
    if count > max_values or values + 16 * count > len(data):
        return []
    return [(values, count)]


def _check_local_heaps(buf: Any, data: memoryview, base: int, name: Any) -> None:
    """Each local heap's free list must end, inside the heap's data segment. A heap
    is (signature, version 0, 3 reserved, data segment size: 8, offset of the first
    free block: 8, data segment address: 8); a free block (offset of the next: 8,
    its size: 8). libhdf5 (H5HL__fl_deserialize) checks each block's bounds but not
    that the list ends: a block that points back loops, a node allocated per turn."""
    size = len(data)
    pos = buf.find(b"HEAP")
    while pos != -1:
        if pos + 32 <= size and data[pos + 4] == 0:
            dsize, block, segment = _u(data, pos + 8), _u(data, pos + 16), base + _u(data, pos + 24)
            if segment + dsize <= size:  # else libhdf5 cannot read the segment and says so
                seen = set()
                while block != _FREE_NULL:
                    if block in seen or block + 16 > dsize:
                        raise ModelFileError(
                            f"{name}: corrupt HDF5 file: the free list of the local heap at byte {pos} "
                            f"{'loops' if block in seen else 'leaves the heap'} (block at offset {block:,})"
                        )
                    seen.add(block)
                    block = _u(data, segment + block)
        pos = buf.find(b"HEAP", pos + 4)
