"""Finding adapters: built-in and third-party ones alike come from the
``k2conform.adapters`` entry-point group, so a plugin package needs no change here."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

from k2conform.adapter.contract import Adapter, AdapterGlueError, AdapterUnavailable

ENTRY_POINT_GROUP = "k2conform.adapters"
BUILTIN_ORDER = ("reference", "vllm", "sglang", "reference-k3", "vllm-k3", "sglang-k3")


class UnknownAdapter(KeyError):
    def __str__(self) -> str:
        return f"unknown adapter {self.args[0]!r} (known: {', '.join(adapter_names())})"


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def adapter_names() -> list[str]:
    """Every registered adapter: the built-ins first, then plugins by name."""
    names = list(_entry_points())
    return [n for n in BUILTIN_ORDER if n in names] + sorted(
        n for n in names if n not in BUILTIN_ORDER
    )


def default_adapter_names() -> list[str]:
    """The adapters a command runs when none is named: every registered one but the opt-in ones
    (``run_by_default = False``: a real server, minutes per run)."""
    points = _entry_points()
    return [
        n for n in adapter_names() if _adapter_class(points[n]).run_by_default
    ]


def _adapter_class(entry_point: importlib.metadata.EntryPoint) -> type[Adapter]:
    """The entry point's class; a plugin whose module does not import becomes an adapter
    whose ``load`` reports that as ``adapter-error``, so one broken plugin stops no run."""
    try:
        return entry_point.load()
    except Exception as exc:  # noqa: BLE001 - any import failure of a plugin module
        reason = f"{type(exc).__name__}: {exc}"

        class Unimportable(Adapter):
            name = entry_point.name
            description = f"cannot import {entry_point.value}"

            def load(self) -> None:
                raise AdapterGlueError(f"import {entry_point.value}", reason)

            def parse_whole(self, request, output):  # never reached: load() raises
                raise AssertionError("not loaded")

            parse_stream = parse_whole

        return Unimportable


def create_adapter(name: str, cell_deadline: float | None = None) -> Adapter:
    """An adapter instance, not yet loaded.  ``cmd:COMMAND ARGS`` (or ``NAME=cmd:...``) is an
    adapter in another process speaking the adapter protocol (docs/adapter-protocol.md);
    ``cell_deadline`` (the run's ``--timeout``) scales the deadline of its startup hello."""
    from k2conform.adapter.command import CommandAdapter
    from k2conform.adapter.protocol import is_command_spec

    if is_command_spec(name):
        return CommandAdapter(name, cell_deadline)
    entry_point = _entry_points().get(name)
    if entry_point is None:
        raise UnknownAdapter(name)
    return _adapter_class(entry_point)()


@dataclass(frozen=True)
class Availability:
    """What ``load()`` said: ``ok``, ``unavailable`` or ``adapter-error``, with the reason."""

    status: str
    reason: str = ""


def load(adapter: Adapter) -> Availability:
    try:
        adapter.load()
    except AdapterUnavailable as error:
        return Availability("unavailable", str(error))
    except AdapterGlueError as error:
        return Availability("adapter-error", str(error))
    return Availability("ok")
