"""Where the project's data lives, whether k2conform runs from a checkout or from a wheel.

A source checkout (an editable install included) reads the repository's own folders, so an
edited or newly generated case is seen at once; an installed wheel reads the copies it
carries in :mod:`k2conform.bundle`, through :mod:`importlib.resources`.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

#: The repository folders a wheel carries, by the name they are asked for.
BUNDLED = ("corpus", "requirements", "docs", "fuzz")


def checkout_root() -> Path | None:
    """The repository root when this package runs from a source checkout, else None."""
    root = Path(__file__).resolve().parents[2]
    marker = root / "pyproject.toml"
    if (
        marker.is_file()
        and (root / "corpus").is_dir()
        and 'name = "k2conform"' in marker.read_text()
    ):
        return root
    return None


def bundled(name: str) -> Path:
    """The folder ``name`` (one of :data:`BUNDLED`): the checkout's, else the installed copy."""
    if name not in BUNDLED:
        raise ValueError(f"{name!r} is not bundled (bundled: {', '.join(BUNDLED)})")
    root = checkout_root()
    if root is not None:
        return root / name
    path = Path(str(importlib.resources.files("k2conform.bundle").joinpath(name)))
    if not path.is_dir():
        raise FileNotFoundError(
            f"this k2conform installation carries no {name}/ (looked in {path})"
        )
    return path
