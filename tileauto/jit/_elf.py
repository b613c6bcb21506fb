"""Checking a shared library's ELF headers against its size before it is loaded in-process.

The dynamic loader maps a library's segments straight from the file: when the file is shorter
than its headers say (a truncated copy, a disk that filled up), touching a mapped page past its
end raises SIGBUS, which kills the calling process before any Python code can catch anything.
So every range the headers declare (the program and section header tables, each segment, and
each section with bytes in the file) is checked against the file's size first, reading only
the headers. A file that does not start as ELF is left to the loader, which refuses it cleanly.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NoReturn

from tileauto.errors import CacheError

_MAGIC = b"\x7fELF"
_IDENT = 16  # e_ident: magic, class, data encoding, version, ABI, padding
_SHT_NOBITS = 8  # a section with no bytes in the file (.bss)


@dataclass(frozen=True)
class _Layout:
    """The struct formats of one ELF class, and where the fields checked here sit in them."""

    header: str  # after e_ident: type .. shstrndx
    segment: str
    segment_range: tuple[int, int]  # p_offset, p_filesz
    section: str  # sh_type is field 1, sh_offset 4, sh_size 5 in both classes


_LAYOUTS = {
    1: _Layout("HHIIIIIHHHHHH", "IIIIIIII", (1, 4), "IIIIIIIIII"),
    2: _Layout("HHIQQQIHHHHHH", "IIQQQQQQ", (2, 5), "IIQQQQIIQQ"),
}


def check_library(path: str | Path) -> None:
    """Refuse a shared library that is shorter than its ELF headers declare.

    Raises:
        CacheError: the headers place a table, a segment or a section past the end of the
            file, or cannot be read; the message names the file, the size its headers need
            and the size it has.
    """
    path = Path(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        ident = f.read(_IDENT)
        if ident[: len(_MAGIC)] != _MAGIC:
            return  # not ELF: dlopen refuses it with an error, it maps nothing
        if len(ident) < _IDENT:
            _refuse(path, "the ELF identification", _IDENT, size)
        _check_tables(path, f, size, ident)


def _check_tables(path: Path, f: BinaryIO, size: int, ident: bytes) -> None:
    cls, encoding = ident[4], ident[5]
    layout = _LAYOUTS.get(cls)
    if layout is None or encoding not in (1, 2):
        raise CacheError(
            f"{path} is not a loadable shared library: ELF class {cls} and data encoding "
            f"{encoding}, expected 1 or 2 each; delete it and compile again"
        )
    order = "<" if encoding == 1 else ">"
    header = struct.Struct(order + layout.header)
    raw = f.read(header.size)
    if len(raw) < header.size:
        _refuse(path, "the ELF header", _IDENT + header.size, size)
    fields = header.unpack(raw)
    phoff, shoff = fields[4], fields[5]
    phentsize, phnum, shentsize, shnum = fields[8], fields[9], fields[10], fields[11]
    start, length = layout.segment_range
    for entry in _table(
        path, f, size, "program header table", phoff, phentsize, phnum, order + layout.segment
    ):
        _within(path, "a segment", entry[start], entry[length], size)
    if shoff == 0:
        return  # no section headers: the loader does not read them
    if shnum == 0:  # extended numbering: section 0's sh_size holds the count
        (first,) = _table(
            path, f, size, "section header table", shoff, shentsize, 1, order + layout.section
        )
        shnum = first[5]
    for entry in _table(
        path, f, size, "section header table", shoff, shentsize, shnum, order + layout.section
    ):
        if entry[1] != _SHT_NOBITS:
            _within(path, "a section", entry[4], entry[5], size)


def _table(
    path: Path,
    f: BinaryIO,
    size: int,
    what: str,
    offset: int,
    entsize: int,
    count: int,
    fmt: str,
) -> list[tuple[int, ...]]:
    """The entries of a header table, checked to lie inside the file."""
    entry = struct.Struct(fmt)
    if count == 0:
        return []
    if entsize < entry.size:
        raise CacheError(
            f"{path} is not a loadable shared library: its {what} has entries of {entsize} "
            f"bytes, expected at least {entry.size}; delete it and compile again"
        )
    _within(path, f"the {what}", offset, entsize * count, size)
    f.seek(offset)
    raw = f.read(entsize * count)
    return [entry.unpack_from(raw, i * entsize) for i in range(count)]


def _within(path: Path, what: str, offset: int, length: int, size: int) -> None:
    if offset + length > size:
        _refuse(path, what, offset + length, size)


def _refuse(path: Path, what: str, end: int, size: int) -> NoReturn:
    raise CacheError(
        f"{path} is truncated or damaged: its ELF headers place {what} up to byte {end}, "
        f"but the file has {size} bytes (loading it would kill this process with SIGBUS); "
        "delete it, or the cache entry or saved folder that holds it, and compile again"
    )
