"""The ``repro_script`` every adapter with a reproduction driver has: the driver named by the
adapter (``repro/<driver>.py``), joined into one standalone script by ``repro.build``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from k2conform.model import Delta, Request


class Reproducible:
    """Mixed into an adapter: ``report-finding``'s script comes from ``repro/<repro_driver>.py``."""

    repro_driver: ClassVar[str]
    #: The delivery modes the driver reproduces (None: every one); another mode has no script.
    repro_modes: ClassVar[tuple[str, ...] | None] = None

    def repro_script(
        self,
        request: Request,
        deltas: Sequence[Delta],
        mode: str,
        *,
        expected: dict | None = None,
        case_id: str = "case",
    ) -> str | None:
        """A standalone script that drives the parser the same way, importing only its package."""
        from k2conform_adapters.repro import build_script

        if self.repro_modes is not None and mode not in self.repro_modes:
            return None
        return build_script(
            self.repro_driver,
            request,
            deltas,
            mode,
            expected=expected,
            case_id=case_id,
            format=self.formats[0],
        )
