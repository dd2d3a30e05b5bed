"""The shared objects an environment can never load on this machine, removed after install.

The engines' wheels carry their CUDA kernels (vLLM 0.11.0: 1.27 of its 1.3 GB).  The parser
closures run on the CPU build of torch, which has no ``libtorch_cuda.so``, so nothing in the
environment can load those objects, and the code under test never does: vLLM's ``import
vllm._C`` fails and is caught the same way whether the file is missing or cannot be loaded.
Removing them keeps a release environment at tens of MB instead of 1.3 GB, so every lane's
environments fit on a small disk (docs/testing.md).  An object goes only when a library it names
(ELF ``DT_NEEDED``) is nowhere to be found: not among the environment's files (its base's
included) nor in the system loader's cache.  Anything that is not a 64-bit little-endian ELF
object is kept.
"""

from __future__ import annotations

import os
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

_DT_NEEDED = 1
_SHT_DYNAMIC = 6
#: Where the loader looks when ``ldconfig -p`` cannot be read.
_SYSTEM_DIRS = (
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/usr/local/lib",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
)


@dataclass(frozen=True)
class Unloadable:
    """One object removed, and the first library it needs that this machine does not have."""

    path: Path
    size: int
    missing: str


def needed(path: Path) -> list[str] | None:
    """The libraries an ELF object names (``DT_NEEDED``), or None if it is not one we read."""
    try:
        with open(path, "rb") as f:
            header = f.read(64)
            if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
                return None
            (shoff,) = struct.unpack_from("<Q", header, 0x28)
            shentsize, shnum = struct.unpack_from("<HH", header, 0x3A)
            f.seek(shoff)
            table = f.read(shentsize * shnum)
            sections = [
                struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)
            ]
            dynamic = [s for s in sections if s[1] == _SHT_DYNAMIC]
            if not dynamic:
                return []
            _, _, _, _, offset, size, link, _, _, _ = dynamic[0]
            f.seek(offset)
            entries = f.read(size)
            strtab = sections[link]
            f.seek(strtab[4])
            strings = f.read(strtab[5])
    except (OSError, struct.error, IndexError):
        return None
    names = []
    for i in range(0, len(entries) - 15, 16):
        tag, value = struct.unpack_from("<qQ", entries, i)
        if tag == 0:
            break
        if tag == _DT_NEEDED:
            names.append(strings[value : strings.index(b"\0", value)].decode("utf-8", "replace"))
    return names


def system_libraries() -> set[str]:
    """The library names the system's loader can find (its cache, else its usual folders)."""
    names: set[str] = set()
    try:
        listing = subprocess.run(
            ["/sbin/ldconfig", "-p"], capture_output=True, text=True, check=True
        ).stdout
        names = {line.split()[0] for line in listing.splitlines()[1:] if line.strip()}
    except (OSError, subprocess.CalledProcessError):
        pass
    for directory in (*_SYSTEM_DIRS, *os.environ.get("LD_LIBRARY_PATH", "").split(":")):
        if directory and os.path.isdir(directory):
            names.update(os.listdir(directory))
    return names


def _is_so(name: str) -> bool:
    return name.endswith(".so") or ".so." in name


def unloadable(own: Path, visible: list[Path], system: set[str]) -> list[Unloadable]:
    """The objects under ``own`` that need a library found nowhere (repeated until none more:
    an object that needs a removed one goes too)."""
    elsewhere = set(system)
    for root in visible:
        elsewhere.update(p.name for p in root.rglob("*.so*") if _is_so(p.name))
    names = [p for p in own.rglob("*.so*") if _is_so(p.name)]
    pending = {p: needed(p) for p in sorted(names) if p.is_file() and not p.is_symlink()}
    found: list[Unloadable] = []
    changed = True
    while changed:
        changed = False
        gone = {item.path for item in found}
        present = elsewhere | {p.name for p in names if p not in gone}
        for path, libraries in list(pending.items()):
            lack = next((n for n in libraries or () if n not in present), None)
            if lack is not None:
                found.append(Unloadable(path, path.stat().st_size, lack))
                del pending[path]
                changed = True
    return found


def prune(own: Path, visible: list[Path]) -> list[Unloadable]:
    """Remove :func:`unloadable`'s objects; returns what went (an OSError as it came)."""
    gone = unloadable(own, visible, system_libraries())
    for item in gone:
        item.path.unlink()
    return gone
