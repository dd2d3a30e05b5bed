"""The adapter contract: a thin wrapper that drives one parser the way its server does.

An adapter has two halves, kept apart on purpose:

* the *glue* (imports, request objects, attribute look-ups): written against one
  release of the parser's package.  When the installed release no longer has what the
  glue needs, the adapter raises :class:`AdapterGlueError` and every cell of that
  adapter becomes ``adapter-error``: a fact about the adapter, never a parser finding;
* the *parser's own calls*, each made through :func:`call_parser`: an exception in
  there is the parser's, and becomes a ``crash`` finding.

Any other exception escaping an adapter is treated as glue breakage too, so an adapter
bug can never be counted against the parser it wraps.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from threading import Barrier
from types import ModuleType
from typing import Any, Callable, ClassVar, Iterator, Sequence, TypeVar

from k2conform.model import Delta, Request, RequestFate, Result, StreamEvent, StreamReply

T = TypeVar("T")

#: One stream's parser state, fed a delta at a time (``Adapter.open_stream``): the delta, whether
#: it is the one the server finishes with, and the events it sent for it.  Several can be open
#: over one adapter at once, as a server's requests are (``adapter.harness.interleave``).
StreamStep = Callable[[Delta, bool], list[StreamEvent]]


@dataclass(frozen=True)
class GrammarUse:
    """How a server applies the structural tag it builds for a request (``k2conform grammar``):
    the default is a grammar over text that holds from the first character to the end."""

    #: Thinking on, the grammar holds only after the reasoning parser's think closer (SGLang's
    #: ``ReasonerGrammarObject``); None: that hand-over is not modelled for this engine.
    think_end: str | None = None
    #: Stop strings: generation ends once the output holds one, wherever the grammar is.
    stops: tuple[str, ...] = ()
    #: Special tokens the tag names as tokens: acceptance goes over tokens, each of these one.
    tokens: tuple[str, ...] = ()


#: A cell past its deadline is run once more with this many times the deadline before it is a
#: ``timeout`` finding (on a loaded machine a first timeout says little about the parser): an
#: adapter that waits on a server may wait that long (``Adapter.longest_wait``).
RETRY_FACTOR = 10


class AdapterUnavailable(Exception):
    """The parser's package is not installed here; the adapter reports ``unavailable``."""


class AdapterGlueError(Exception):
    """The adapter's glue does not fit the installed release (a missing API, a changed
    signature)."""

    def __init__(self, api: str, detail: str = "") -> None:
        self.api = api
        super().__init__(f"{api}: {detail}" if detail else api)


class RequestRefused(Exception):
    """A server did not serve the request: it refused it (an HTTP 4xx) or ended it before a
    reply (``RequestFate``).  The request's fate, judged against the case's: a finding of the
    server, never a crash of its parser."""

    def __init__(self, fate: RequestFate, detail: str) -> None:
        self.fate = fate
        self.detail = detail
        super().__init__(f"{fate.value}: {detail}")


class ParserCrash(Exception):
    """The parser under test raised while parsing; wraps its exception."""

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        super().__init__(f"{type(cause).__name__}: {cause}")


def call_parser(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call into the parser under test; anything it raises is the parser's crash."""
    try:
        return function(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every parser exception is a finding
        raise ParserCrash(exc) from exc


def import_parser_package(name: str) -> ModuleType:
    """Import the parser's top-level package: missing → unavailable; a missing dependency of
    an installed package → glue error (the closure the adapter was written for has changed)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == name:
            raise AdapterUnavailable(f"{name} is not installed: {exc}") from exc
        raise AdapterGlueError(f"import {name}", f"a dependency is missing: {exc}") from exc


@contextmanager
def glue_imports(package: str) -> Iterator[None]:
    """Wrap the imports of the parser's modules the glue needs: a module or name the
    installed release no longer has is glue breakage, named as such."""
    try:
        yield
    except ImportError as exc:
        raise AdapterGlueError(f"{package} module layout", str(exc)) from exc


def require_api(owner: Any, *names: str, owner_name: str | None = None) -> None:
    """Check, when the adapter loads, that the parser's package still has these attributes."""
    label = owner_name or getattr(owner, "__name__", type(owner).__name__)
    for name in names:
        if not hasattr(owner, name):
            raise AdapterGlueError(f"{label}.{name}", "missing in the installed release")


class Adapter(ABC):
    """One parser under test.  Subclasses set the class attributes and the two parse methods.

    ``load`` is called once per process before any parse (imports are slow: vLLM takes
    seconds); it raises :class:`AdapterUnavailable` or :class:`AdapterGlueError`.
    """

    #: The name used on the command line and in reports.
    name: ClassVar[str]
    #: The distribution whose installed version the adapter reports (None: this project).
    package: ClassVar[str | None] = None
    #: The releases the glue was written and checked against.
    supported_versions: ClassVar[tuple[str, ...]] = ()
    #: One line for ``list-adapters``.
    description: ClassVar[str] = ""
    #: The parser package's own files that exist for Kimi, measured by ``k2conform coverage``:
    #: paths whose first part is the top-level import package ("vllm/parser/kimi_k2.py").
    #: Empty: the adapter is listed as "not measured".
    coverage_files: ClassVar[tuple[str, ...]] = ()
    #: Code of that package the Kimi parser runs through but other model families share (an
    #: engine, a base class): measured too, with the share Kimi can reach reported beside it.
    coverage_shared_files: ClassVar[tuple[str, ...]] = ()
    #: The server's own files around the parser whose steps the glue re-states or calls (the
    #: chat-completion serving code): with the two lists above, the files ``k2conform verify``
    #: compares between a base and a head ("which Kimi-relevant files changed").
    serving_files: ClassVar[tuple[str, ...]] = ()
    #: Whether the server it models streams text held back while a stop string could match, the
    #: token ids at once (vLLM's detokenizer): only such an adapter takes ``stream-holdback``.
    stop_string_holdback: ClassVar[bool] = False
    #: The ``request.server_options`` it applies itself, as its server does (SGLang's
    #: ``stream_reasoning``, ...): a case whose options are all among them is judged in this
    #: adapter's own modes too, not only in the server modes (``run.cell.case_unfit``).
    request_options: ClassVar[frozenset[str]] = frozenset()
    #: The formats it parses (``case.corpus.FORMATS``): the matrix plans a cell only where a
    #: case's format is among them, so nothing downstream asks which format a case is.
    formats: ClassVar[tuple[str, ...]] = ("k2",)
    #: The delivery modes it takes; None: every in-process mode (``delivery.modes``), a
    #: server adapter names the server modes.
    delivery_modes: ClassVar[tuple[str, ...] | None] = None
    #: The shortest deadline of its cells, in seconds (the runner takes the longer of this and
    #: ``--timeout``): a real server generates a 30,000-token case in minutes.
    cell_timeout: ClassVar[float] = 0.0
    #: Requests it serves at once: the runner's worker count for it (0: one per core).
    parallel_requests: ClassVar[int] = 0
    #: Whether a run that names no adapter runs it (False: a real server, asked for by name).
    run_by_default: ClassVar[bool] = True

    def version(self) -> str | None:
        """The installed release of the parser's package, or None when it is not installed.
        Read once per adapter object: the harness records it with every result, and reading a
        package's metadata takes milliseconds (a third of a differential fuzz execution)."""
        if self.package is None:
            from k2conform import __version__

            return __version__
        if "_installed_version" not in self.__dict__:
            try:
                self._installed_version = importlib.metadata.version(self.package)
            except importlib.metadata.PackageNotFoundError:
                self._installed_version = None
        return self._installed_version

    def supported(self) -> bool | None:
        """Whether the installed release is one the glue was written for (None: unknown)."""
        installed = self.version()
        if installed is None or not self.supported_versions:
            return None
        return installed in self.supported_versions

    def load(self) -> None:
        """Import the parser and check the API the glue needs."""

    @abstractmethod
    def parse_whole(self, request: Request, output: Delta) -> Result:
        """Parse the complete output with the one-shot API."""

    def parse_stream(
        self, request: Request, deltas: Sequence[Delta]
    ) -> list[StreamEvent] | StreamReply:
        """Feed the deltas one by one to the streaming API; return every delta message sent
        (a server adapter overrides it: with the wire contract's violations, a
        ``StreamReply``).  An in-process adapter writes only :meth:`open_stream`."""
        step = self.open_stream(request)
        events: list[StreamEvent] = []
        for delta, finished in stream_steps(deltas):
            events.extend(step(delta, finished))
        return events

    def parse_concurrent(
        self, request: Request, deltas: Sequence[Delta], copies: int
    ) -> list[list[StreamEvent] | StreamReply]:
        """The same stream sent ``copies`` times at once (``server-concurrent``): each copy
        on a thread of its own, started together past a barrier, so all are in flight in
        the server at the same time.  The default fits a server adapter, whose
        :meth:`parse_stream` is a request that other threads' requests may share a client
        with; the first copy to fail fails the parse."""
        barrier = Barrier(copies)

        def one() -> list[StreamEvent] | StreamReply:
            barrier.wait()
            return self.parse_stream(request, deltas)

        with ThreadPoolExecutor(copies) as pool:
            futures = [pool.submit(one) for _ in range(copies)]
            return [future.result() for future in futures]

    def open_stream(self, request: Request) -> StreamStep:
        """A new stream's parser state, as its server sets one up for a request: each call
        feeds it one delta.  The default: the adapter parses a stream only whole (a server,
        another process), so no stream of it can be interleaved with another."""
        raise AdapterUnavailable(
            f"{self.name} parses a stream only whole: it opens no stream to feed a delta at a time"
        )

    @property
    def opens_streams(self) -> bool:
        """Whether it writes :meth:`open_stream` (``stream-interleaved`` needs it)."""
        return type(self).open_stream is not Adapter.open_stream

    @property
    def longest_wait(self) -> float:
        """How long one parse may take before the runner gives up on its cell, when the run's
        ``--timeout`` is not longer than ``cell_timeout``: the deadline, and once more
        ``RETRY_FACTOR`` times as long (the backstop of a client the adapter holds)."""
        return self.cell_timeout * RETRY_FACTOR

    @contextmanager
    def run_session(self, run_dir: Path) -> Iterator[dict[str, str]]:
        """Run-wide set-up in the runner's process, before its workers start and after they
        end (a real server): yields the environment variables the workers need; a set-up that
        failed yields ``K2CONFORM_..._ERROR`` with why (``k2conform session`` stops there)."""
        yield {}

    def structural_tag(self, request: Request) -> str | None:
        """The structural tag its server hands the grammar engine for this request
        (``k2conform grammar``); None: decoding is not constrained, or it models no grammar."""
        return None

    def grammar_use(self, request: Request) -> GrammarUse:
        """How its server applies :meth:`structural_tag`'s grammar to this request's output."""
        return GrammarUse()

    def repro_script(
        self,
        request: Request,
        deltas: Sequence[Delta],
        mode: str,
        *,
        expected: dict[str, Any] | None = None,
        case_id: str | None = None,
    ) -> str | None:
        """A standalone script that reproduces this parse outside k2conform
        (``report-finding``); None: it has no template (NO SCRIPT)."""
        return None


def stream_steps(deltas: Sequence[Delta]) -> list[tuple[Delta, bool]]:
    """Each delta with whether the server finishes with it (the last; an empty stream is one
    empty delta, as a server sends the finishing chunk of an empty output)."""
    steps = list(deltas) or [Delta("")]
    return [(delta, n == len(steps) - 1) for n, delta in enumerate(steps)]
