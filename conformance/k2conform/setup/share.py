"""Identical files across the environments, stored once (hard links).

The environments repeat each other: pip and setuptools in every venv, the files one release of
an engine did not change from the last.  Linked, the lanes' environments took 4.1 GB less on
5 Dec 2026 (12.5 GB before).  Nothing in an environment is written in place after its build:
pip removes a package's files before it installs another release, Python replaces a bytecode
file rather than writing into it, and the overlay of a source checkout unlinks a file before it
writes the new one.  Files on different devices, or with different modes, are left apart.
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from pathlib import Path


def _files(roots: list[Path]) -> dict[tuple[int, int, int], list[tuple[Path, os.stat_result]]]:
    """Regular files by (device, size, mode), each inode once."""
    groups: dict[tuple[int, int, int], list[tuple[Path, os.stat_result]]] = defaultdict(list)
    seen: set[tuple[int, int]] = set()
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                path = Path(folder, name)
                stat = path.lstat()
                if not path.is_file() or path.is_symlink() or stat.st_size == 0:
                    continue
                if (stat.st_dev, stat.st_ino) in seen:
                    continue
                seen.add((stat.st_dev, stat.st_ino))
                groups[(stat.st_dev, stat.st_size, stat.st_mode)].append((path, stat))
    return groups


def _digest(path: Path) -> bytes:
    hasher = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            hasher.update(chunk)
    return hasher.digest()


def share(roots: list[Path]) -> tuple[int, int]:
    """Link every file under ``roots`` to the first identical one; returns (files, bytes) saved."""
    linked = saved = 0
    for (_, size, _), members in _files(roots).items():
        if len(members) < 2:
            continue
        first: dict[bytes, Path] = {}
        for path, _ in members:
            digest = _digest(path)
            original = first.setdefault(digest, path)
            if original is path:
                continue
            spare = path.with_name(f".{path.name}.k2conform-link")
            os.link(original, spare)
            os.replace(spare, path)
            linked += 1
            saved += size
    return linked, saved
