"""One cell: a case through one adapter in one delivery mode, judged.  The one code path for
every entry point that asks for a cell (``run``'s workers, ``parse``, the test kit,
``report-finding``, ``serve-adapter``, the fuzzers and ``bench``), so a deadline, the variant
a cell reports and the judging rules are the same wherever a cell is computed.  This stage
delivers, times and picks the worst variant; the judgement of each is
:func:`k2conform.judge.cell.judge_result`.
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Collection, Iterator

from k2conform.adapter.contract import RETRY_FACTOR
from k2conform.adapter.harness import execute
from k2conform.adapter.registry import Availability, load
from k2conform.case.corpus import CompletionCase
from k2conform.delivery import modes
from k2conform.delivery.modes import Delivery
from k2conform.errors import UsageError
from k2conform.judge.cell import judge_result
from k2conform.model import SEVERITY, Cell, Request, ResultOutcome


@dataclass(frozen=True)
class CellSettings:
    """How a cell is delivered and how long it may take."""

    seed: int = modes.DEFAULT_SEED
    burst: int = modes.DEFAULT_BURST
    tokenizer: str | None = None  #: a real Kimi tokenizer directory (None: the stand-in)
    deadline: float = 20.0  #: seconds for all of a cell's variants

    def __post_init__(self) -> None:
        if not self.deadline > 0:
            raise ValueError(f"a deadline must be more than 0 seconds, not {self.deadline:g}")
        if self.burst < 1:
            raise ValueError(f"a burst is at least 1 token, not {self.burst}")

    @classmethod
    def from_args(cls, args: Any) -> CellSettings:
        """A command's ``--seed``, ``--burst``, ``--tokenizer`` and ``--timeout``; a bad one is a
        usage error."""
        try:
            settings = cls(
                seed=args.seed, burst=args.burst, tokenizer=args.tokenizer, deadline=args.timeout
            )
        except ValueError as error:
            raise UsageError(str(error)) from None
        if settings.tokenizer is not None:
            try:  # a tokenizer that cannot load is the user's, said before any cell runs
                _tokenizer(settings)
            except (ValueError, OSError) as error:
                raise UsageError(f"--tokenizer {settings.tokenizer}: {error}") from None
        return settings

    def for_adapter(self, adapter: Any) -> CellSettings:
        """The settings with the deadline an adapter asks for when it needs longer
        (``cell_timeout``:
        a real server generates a 30,000-token case in minutes, not seconds)."""
        wanted = adapter.cell_timeout
        return replace(self, deadline=wanted) if wanted > self.deadline else self

    @property
    def hard_limit(self) -> float:
        """How long a whole cell, retry included, may take before its process is given up."""
        return self.deadline * (1 + RETRY_FACTOR) + 5.0


class DeadlinePassed(BaseException):
    """Raised by the alarm; a BaseException, so no parser's ``except Exception`` swallows it."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`DeadlinePassed` in this thread after ``seconds`` (SIGALRM in the main thread;
    an
    enclosing timer, such as pytest-timeout's, is restored with its remaining time).  Off the
    main thread there is no alarm: the worker pool's hard limit still holds there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def alarm(signum: int, frame: Any) -> None:
        raise DeadlinePassed()

    started = time.monotonic()
    previous_handler = signal.signal(signal.SIGALRM, alarm)
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay:
            remaining = previous_delay - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(remaining, 0.001), previous_interval)


def run_cell(
    adapter: Any,
    case: CompletionCase,
    mode: str,
    settings: CellSettings = CellSettings(),
    availability: Availability | None = None,
    whole_cache: dict | None = None,
) -> Cell:
    """Every variant of ``mode`` through ``adapter``, within the deadline; the cell reports the
    worst variant.  A cell past its deadline is re-run with ``RETRY_FACTOR`` times as long and
    judged on that result (recorded as ``meta.slow``); only a second timeout is ``timeout``."""
    started = time.perf_counter()
    availability = availability or load(adapter)
    settings = settings.for_adapter(adapter)
    if availability.status != ResultOutcome.OK:
        return Cell.failed(case.id, adapter.name, mode, availability.status, availability.reason)
    unfit = _mode_unfit(adapter, case, mode)
    if unfit:
        return Cell.failed(case.id, adapter.name, mode, "unavailable", unfit)
    variants = modes.case_deliveries(
        case, mode, _tokenizer(settings), seed=settings.seed, burst=settings.burst
    )
    cache = whole_cache if whole_cache is not None else {}
    try:
        with deadline(settings.deadline):
            cell = _judged(adapter, case, mode, variants, settings, cache)
    except DeadlinePassed:
        first = time.perf_counter() - started
        try:
            with deadline(settings.deadline * RETRY_FACTOR):
                cell = _judged(adapter, case, mode, variants, settings, cache)
        except DeadlinePassed:
            return Cell.failed(
                case.id,
                adapter.name,
                mode,
                "timeout",
                f"no result within {settings.deadline:g} s, nor within "
                f"{settings.deadline * RETRY_FACTOR:g} s when run again",
            ).timed(time.perf_counter() - started)
        slow = {
            "deadline": settings.deadline,
            "first_try_seconds": round(first, 3),
            "seconds": round(time.perf_counter() - started - first, 3),
        }
        cell = replace(cell, observed=cell.observed.with_meta(slow=slow) if cell.observed else None)
    return cell.timed(time.perf_counter() - started)


def case_unfit(
    case: CompletionCase, mode: str, request_options: Collection[str] = ()
) -> str | None:
    """Why a case has no cell in this mode (None: it has): a request-level case is judged in
    the server modes only; a server-level case (``server_options``) is judged in the server
    modes, and in an in-process adapter's modes only when the adapter applies every one of its
    options itself (``request_options``);
    ``stream-recorded`` replays the deltas a case recorded.  The matrix plans no such cell;
    asked for one, it is ``unavailable`` with this reason."""
    if case.request_level and mode not in modes.SERVER_MODES:
        return (
            "a request-level case (expected.request): judged where a request is served, in the "
            "server modes and by k2conform grammar"
        )
    unapplied = sorted(set(case.request.server_options) - set(request_options))
    if unapplied and mode not in modes.SERVER_MODES:
        return (
            f"a server-level case (request.server_options {', '.join(unapplied)}): judged in "
            "the server modes and by adapters that apply those options"
        )
    if mode == "stream-recorded" and case.deltas is None:
        return "the case has no recorded deltas"
    if case.spelled_markers and mode in modes.TEXT_LEVEL_MODES:
        return "it spells markers from ordinary token ids, and a text-level mode sends no ids"
    return None


def _mode_unfit(adapter: Any, case: CompletionCase, mode: str) -> str | None:
    """Why this adapter cannot take this case in this mode (None: it can).  Server modes need a
    server adapter, which takes nothing else."""
    if mode not in modes.adapter_modes(adapter):
        taken = ", ".join(modes.adapter_modes(adapter))
        return f"{adapter.name} takes the delivery modes {taken}, not {mode}"
    return case_unfit(case, mode, adapter.request_options)


def _judged(
    adapter: Any,
    case: CompletionCase,
    mode: str,
    variants: list[Delivery],
    settings: CellSettings,
    cache: dict,
) -> Cell:
    # The streams first, then the one-shot parse they are checked against: a server adapter
    # can then share one one-shot reply between this cell and its server-whole cell.
    results = [execute(adapter, case.request, v) for v in variants]
    whole = None
    if variants[0].streaming:
        key = (case.id, adapter.name)
        if key not in cache:
            if len(cache) > 256:
                cache.clear()
            cache[key] = execute(
                adapter,
                case.request,
                modes.case_deliveries(case, "whole", _tokenizer(settings), seed=settings.seed)[0],
            )
        whole = cache[key]
    judged = [judge_result(case, result, whole) for result in results]
    outcome, diffs, result = min(judged, key=lambda j: SEVERITY.index(j[0]))
    differing = [v.label for v, j in zip(variants, judged) if not j[0].passing]
    return Cell(
        case.id,
        adapter.name,
        mode,
        outcome,
        diffs=tuple(diffs),
        observed=result,
        variant=str(result.meta.get("delivery", mode)),
        variants_differing=tuple(differing) if len(variants) > 1 else (),
    )


def _tokenizer(settings: CellSettings) -> Any:
    from k2conform.delivery.tokenizer import load_tokenizer

    return load_tokenizer(settings.tokenizer)


def adhoc_case(
    request: Request,
    model_output: str,
    deltas: tuple[str, ...] | None = None,
    case_id: str = "i_adhoc",
) -> CompletionCase:
    """A case without an expectation, for one model output given on the command line (``parse``,
    ``serve-adapter``, the fuzzers): judged only on the stream invariants."""
    return CompletionCase(
        id=case_id,
        description="",
        tags=(),
        source="adhoc",
        request=request,
        model_output=model_output,
        deltas=deltas,
        expected=None,
    )
