"""The old import path of the reproduction-script builders, for adapters that still call
``NAME_script(request, deltas, mode, expected, case_id)``: that is
``build_script("NAME", request, deltas, mode, expected=..., case_id=...)`` of
:mod:`k2conform_adapters.repro`, where the drivers and their convention are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from k2conform.model import Delta, Request

from k2conform_adapters.repro import build_script


def __getattr__(name: str) -> Callable[..., str]:
    """``NAME_script``: the builder of the ``repro/NAME.py`` driver's scripts."""
    driver = name.removesuffix("_script")
    if driver == name or driver.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def script(
        request: Request,
        deltas: Sequence[Delta],
        mode: str,
        expected: dict[str, Any] | None = None,
        case_id: str = "case",
    ) -> str:
        return build_script(driver, request, deltas, mode, expected=expected, case_id=case_id)

    return script
