"""An adapter in another process: ``--adapter 'cmd:COMMAND ARGS'`` (or ``NAME=cmd:...``).

The command speaks the *k2conform adapter protocol* (docs/adapter-protocol.md), one JSON
object per line, toml-test style:

* on start it writes a **hello** line: ``{"protocol": "k2conform-adapter/1", "name": ...,
  "version": ..., "status": "ok"|"unavailable"|"adapter-error", "reason": ...}``;
* then, for every **request** line it reads on stdin (``{"mode": "whole"|"stream",
  "request": {"tools", "tool_choice", "thinking"}, "deltas": [{"text", "token_ids"}]}``)
  it writes one **response** line on stdout: the canonical result for ``whole``,
  ``{"events": [delta message, ...]}`` for ``stream``, or a failure
  ``{"outcome": "crash"|"adapter-error"|"unavailable", "error": "..."}`` for either.

The process is started once and kept, and shared by the adapters of a thread that name the
same command: a command serving several adapters (``serve-adapter vllm vllm-k3``) says hello
for each, a spec reaches the one parsing the formats it declares, and each request names it.
When it exits, or writes anything that is not a
well-formed response, the request becomes a ``crash`` (:class:`ParserCrash`, with the
exit status and the tail of its stderr), the process is discarded, and the next request
starts a fresh one.  A process that hangs is the runner's business: its per-cell deadline
replaces the worker, and the command dies with it (it is started with a parent-death
signal and in its own process group).

The hello has its own deadline, :func:`handshake_timeout`, scaled with the run's cell deadline
(``--timeout``): a command that never says hello, exits first or writes something else makes
the adapter ``adapter-error`` with one line saying what was waited for, and the run goes on.

The adapter's name in reports is ``NAME`` when given (``vllm-0.11=cmd:...``), otherwise the
whole ``cmd:...`` spec, so two environments of the same parser get distinct names in one
matrix; the version column shows the remote release from the hello.  ``k2conform serve-adapter
NAME`` speaks the protocol for any in-process adapter.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shlex
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from typing import Any, Mapping, Sequence

from k2conform.adapter.contract import Adapter, AdapterGlueError, AdapterUnavailable, ParserCrash
from k2conform.adapter.protocol import (
    ProtocolError,
    declared_formats,
    formats_of,
    is_command_spec,
    events_line,
    raise_failure,
    read_hellos,
    request_line,
    result_line,
    served,
    split_spec,
)
from k2conform.errors import UsageError
from k2conform.model import Delta, Request, Result, StreamEvent, StreamReply, WireViolation

#: The hello's deadline is ``max(HANDSHAKE_FLOOR, HANDSHAKE_FACTOR × the cell deadline)``.
HANDSHAKE_FLOOR = 10.0
HANDSHAKE_FACTOR = 4
#: The cell deadline assumed when the run's is not given (``run --timeout``'s default).
DEFAULT_CELL_DEADLINE = 20.0


def handshake_timeout(cell_deadline: float) -> float:
    """Seconds a command may take to write its hello, for a run whose cells get ``cell_deadline``.

    The hello comes once the command's interpreter has started and imported its parser, which
    costs about what the slowest cell does (``serve-adapter vllm`` said hello after 5.0 s, the
    32 kB-arguments cell takes 5.4 s, both on a quiet 2-core machine), so the cell deadline is the
    right scale: a user who gives a loaded machine more time per cell gives the start more too.
    Four deadlines cover a start that is slower than one cell on a loaded machine (80 s at the
    default 20 s); the floor keeps a short ``--timeout``, meant for a fast parser, from failing a
    real import (10 s is twice vLLM's quiet start).  Either way it is bounded: a command that
    never says hello costs the run this long once per process that waits for it, then
    ``adapter-error``.
    """
    return max(HANDSHAKE_FLOOR, HANDSHAKE_FACTOR * cell_deadline)


class _Peer:
    """One running command: its pipes, its stderr file, and line reading with a deadline."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.stderr = tempfile.TemporaryFile()
        try:
            self.process = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        except OSError as error:
            self.stderr.close()
            raise AdapterGlueError(f"cannot start `{shlex.join(argv)}`: {error}") from error
        self._buffer = b""

    def send(self, message: Mapping[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":")) + "\n"  # ASCII: lone surrogates survive
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(line.encode("utf-8"))
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as error:
            raise ProtocolError(f"cannot write the request: {error}{self.exit_note()}") from error

    def receive(self, timeout: float | None = None) -> Any:
        """The next line as JSON; ProtocolError on EOF, garbage or the deadline."""
        line = self.receive_line(timeout)
        try:
            return json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            shown = line[:120].decode("utf-8", "replace")
            raise ProtocolError(f"not a JSON line on stdout: {shown!r}") from None

    def receive_line(self, timeout: float | None = None) -> bytes:
        """The next stdout line; :class:`PeerSilent` past the deadline, :class:`PeerClosed` at
        EOF."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise PeerSilent(f"no line within {timeout:g} s")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise PeerClosed(self.exit_note())
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def exit_note(self) -> str:
        """`` (exit status N); stderr ends: ...`` once the process has exited, else nothing."""
        try:
            status = self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return ""
        note = f" (exit status {status})"
        tail = self.stderr_tail()
        return note + (f"; stderr ends: {tail}" if tail else "")

    def stderr_tail(self, size: int = 400) -> str:
        """The end of stderr on one line (line breaks shown as `` | ``), for a one-line reason."""
        try:
            self.stderr.seek(0, os.SEEK_END)
            end = self.stderr.tell()
            self.stderr.seek(max(0, end - size))
            tail = self.stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        return " | ".join(line.strip() for line in tail.splitlines() if line.strip())

    def close(self) -> None:
        process = self.process
        if process.poll() is None:
            try:
                assert process.stdin is not None
                process.stdin.close()
                process.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                process.kill()
            process.wait(timeout=5)
        for stream in (process.stdin, process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        self.stderr.close()


class PeerSilent(ProtocolError):
    """The command wrote no line within the deadline."""


class PeerClosed(ProtocolError):
    """The command closed its stdout (it exited, mostly) before the line came."""

    def __init__(self, exit_note: str) -> None:
        self.exit_note = exit_note
        super().__init__(f"the process closed its stdout{exit_note}")


def _die_with_parent() -> None:
    """In the child: receive SIGKILL when the parent (a runner worker) dies."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: the process group kill still applies
        pass


class _Command:
    """One command line's process and its hello line, shared by the adapters of one thread
    that name the same command: a command serving several adapters (``serve-adapter vllm
    vllm-k3``: one release's K2 and K3 parsers) imports its parser once for all of them.
    A failed start is final: recorded and raised again without another start, so no one
    waits for it twice."""

    def __init__(self, argv: Sequence[str], cell_deadline: float) -> None:
        self.argv = list(argv)
        self.cell_deadline = cell_deadline
        self.peer: _Peer | None = None
        self.hellos: list[dict[str, Any]] | None = None  # as said at the first start
        self.error: str | None = None
        self.starts = 0

    def start(self) -> _Peer:
        """A fresh process that has said hello."""
        if self.error is not None:
            raise AdapterGlueError(self.error)
        peer = None
        try:
            peer = _Peer(self.argv)
            self.starts += 1
            hellos = self._handshake(peer)
        except BaseException as error:  # a deadline alarm too: the half-started process goes
            if peer is not None:
                peer.close()
            if isinstance(error, AdapterGlueError):
                self.error = str(error)
            raise
        if self.hellos is None:
            self.hellos = hellos
        self.peer = peer
        return peer

    def _handshake(self, peer: _Peer) -> list[dict[str, Any]]:
        """The hellos, within :func:`handshake_timeout`; else AdapterGlueError saying what came."""
        command = f"`{shlex.join(self.argv)}`"
        timeout = handshake_timeout(self.cell_deadline)
        try:
            line = peer.receive_line(timeout)
        except PeerSilent:
            rule = (
                f"max({HANDSHAKE_FLOOR:g} s, "
                f"{HANDSHAKE_FACTOR} x --timeout {self.cell_deadline:g} s)"
            )
            raise AdapterGlueError(
                f"no hello from {command} within {timeout:g} s (the handshake waits "
                f"{rule}); a slower start needs a larger --timeout"
            ) from None
        except PeerClosed as error:
            note = error.exit_note or " (it closed its stdout)"
            raise AdapterGlueError(f"{command} exited before its hello{note}") from None
        try:
            hello = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            hello = line.decode("utf-8", "replace")
        try:
            return read_hellos(hello)
        except ProtocolError as error:
            raise AdapterGlueError(f"{command}: {error}") from None

    def close(self) -> None:
        if self.peer is not None:
            peer, self.peer = self.peer, None
            peer.close()


_COMMANDS = threading.local()


def _command(argv: Sequence[str], cell_deadline: float) -> _Command:
    """This thread's :class:`_Command` for ``argv``, made on first use and kept while an adapter
    holds it (a new adapter of a command whose adapters are gone starts afresh)."""
    table = getattr(_COMMANDS, "table", None)
    if table is None:
        table = _COMMANDS.table = weakref.WeakValueDictionary()
    key = (tuple(argv), cell_deadline)
    command = table.get(key)
    if command is None:
        command = table[key] = _Command(argv, cell_deadline)
        _LIVE.add(command)
    return command


_LIVE: "weakref.WeakSet[_Command]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for command in list(_LIVE):
        command.close()


class CommandAdapter(Adapter):
    """An adapter whose parser runs in a command speaking the k2conform adapter protocol."""

    package = None
    description = "out-of-process adapter (k2conform adapter protocol over stdin/stdout)"

    def __init__(self, spec: str, cell_deadline: float | None = None) -> None:
        """``cell_deadline`` is the run's ``--timeout`` (None: its default): the hello's deadline
        scales with it."""
        if not is_command_spec(spec):
            raise ValueError(f"not a cmd: adapter: {spec!r}")
        self._label, command = split_spec(spec)
        self._formats = declared_formats(spec)
        self.spec = spec
        try:
            self.argv = shlex.split(command)
        except ValueError as error:  # an unbalanced quote
            raise UsageError(f"{spec!r}: {error}") from None
        if not self.argv:
            raise UsageError(f"{spec!r}: no command after 'cmd:'")
        self.cell_deadline = DEFAULT_CELL_DEADLINE if cell_deadline is None else cell_deadline
        self._command = _command(self.argv, self.cell_deadline)
        #: The hello of the served adapter this spec reaches (the one, or among several the one
        #: parsing the spec's formats), once the command has said hello.
        self._hello: dict[str, Any] | None = None
        self._hello_error: str | None = None

    # --- identity (from the hello) ----------------------------------------------------------

    @property
    def name(self) -> str:  # type: ignore[override]
        """``NAME`` of ``NAME=cmd:...``, else the spec itself: known before the process starts,
        so every cell, including one the runner files for a lost worker, carries it."""
        return self._label or self.spec

    @property
    def starts(self) -> int:
        """How many times the command was started (for every adapter that shares it)."""
        return self._command.starts

    @property
    def supported_versions(self) -> tuple[str, ...]:  # type: ignore[override]
        hello = self._ensure_hello()
        return tuple(hello.get("supported_versions") or ()) if hello else ()

    @property
    def cell_timeout(self) -> float:
        """The longer cell deadline the remote adapter asks for (0: the run's), known once its
        hello has come: asking does not start the process."""
        return float(self._hello.get("cell_timeout") or 0) if self._hello else 0.0

    @property
    def stop_string_holdback(self) -> bool:  # type: ignore[override]
        """The remote adapter's, once its hello has come; before (planning a run) True, so the
        cells are planned and the worker, which has the hello, judges them."""
        return bool(self._hello.get("stop_string_holdback")) if self._hello else True

    @property
    def request_options(self) -> frozenset[str]:  # type: ignore[override]
        """The remote adapter's, once its hello has come; before, none (a run plans no
        server-level case for it)."""
        return frozenset(self._hello.get("request_options") or ()) if self._hello else frozenset()

    @property
    def formats(self) -> tuple[str, ...]:  # type: ignore[override]
        """The formats the spec declares (``NAME[k3]=cmd:...``; default K2), known before the
        hello, since a run plans its cells by them; :meth:`load` holds the hello to them."""
        return self._formats

    def version(self) -> str | None:
        hello = self._ensure_hello()
        return hello.get("version") if hello else None

    def remote_name(self) -> str | None:
        hello = self._ensure_hello()
        return hello["name"] if hello else None

    def _ensure_hello(self) -> dict[str, Any] | None:
        if self._hello is None and self._hello_error is None:
            try:
                self._start()
            except AdapterGlueError:
                pass  # recorded in _hello_error: the identity stays unknown
        return self._hello

    # --- the process ---------------------------------------------------------------------------

    def _start(self) -> _Peer:
        """The command's process, started when it is not running, and this spec's hello among
        the command's; a command that cannot be started, or whose hellos have none for this
        spec, is AdapterGlueError, final for this adapter."""
        if self._hello_error is not None:
            raise AdapterGlueError(self._hello_error)
        try:
            peer = self._command.peer or self._command.start()
            if self._hello is None:
                assert self._command.hellos is not None
                self._hello = self._choose(self._command.hellos)
        except AdapterGlueError as error:
            self._hello_error = str(error)
            raise
        return peer

    def _choose(self, hellos: list[dict[str, Any]]) -> dict[str, Any]:
        """The hello of the served adapter this spec reaches: the only one, or among several
        the one parsing the formats the spec declares."""
        if len(hellos) == 1:
            return hellos[0]
        wanted = tuple(sorted(self.formats))
        for hello in hellos:
            if formats_of(hello) == wanted:
                return hello
        raise AdapterGlueError(
            f"`{shlex.join(self.argv)}` serves {served(hellos)}; none parses "
            f"{','.join(wanted)}, the formats the spec declares: name one's, "
            f"{self._label or 'NAME'}[FORMATS]=cmd:..."
        )

    def close(self) -> None:
        """Stops the command's process (every adapter sharing it starts a fresh one on its next
        request)."""
        self._command.close()

    def load(self) -> None:
        self._start()
        assert self._hello is not None
        status = self._hello.get("status", "ok")
        reason = self._hello.get("reason") or ""
        if status == "unavailable":
            raise AdapterUnavailable(f"{self._hello['name']} (via {self.argv[0]}): {reason}")
        if status == "adapter-error":
            raise AdapterGlueError(f"{self._hello['name']} (via {self.argv[0]})", reason)
        parses = formats_of(self._hello)
        if parses != tuple(sorted(self.formats)):
            # The run planned its cells by the spec: another format's cells would be judged
            # by the wrong rule, or missing ones never planned.
            said = ",".join(parses)
            raise AdapterGlueError(
                f"{self._hello['name']} (via {self.argv[0]})",
                f"it parses {said}, the spec declares {','.join(self.formats)}: "
                f"name the formats in the spec, {self._label or 'NAME'}[{said}]=cmd:...",
            )

    def _request(self, mode: str, request: Request, deltas: Sequence[Delta]) -> Any:
        """One request, one response; a dead or babbling peer is the parser's crash.  A command
        serving several adapters is told which one the request is for."""
        peer = self._start()
        assert self._command.hellos is not None and self._hello is not None
        several = len(self._command.hellos) > 1
        message = request_line(mode, request, deltas, self._hello["name"] if several else None)
        try:
            peer.send(message)
            response = peer.receive()
        except ProtocolError as error:
            self.close()
            raise ParserCrash(error) from None
        except BaseException:
            # Interrupted mid-exchange (a deadline alarm): the peer's next line would
            # answer this request, so it cannot be reused.
            self.close()
            raise
        if not isinstance(response, dict):
            self.close()
            raise ParserCrash(
                ProtocolError(f"a response must be a JSON object, not {type(response).__name__}")
            )
        return response

    # --- the two parse modes ---------------------------------------------------------------

    def parse_whole(self, request: Request, output: Delta) -> Result:
        response = self._request("whole", request, (output,))
        try:
            return result_line(response)
        except ProtocolError as error:
            self.close()
            raise ParserCrash(error) from None

    def parse_stream(
        self, request: Request, deltas: Sequence[Delta]
    ) -> list[StreamEvent] | StreamReply:
        response = self._request("stream", request, deltas)
        try:
            if "events" not in response:
                raise_failure(response)
            events = events_line(response)
            wire = response.get("wire")
            if wire:
                return StreamReply(events, tuple(WireViolation.from_json(v) for v in wire))
            return events
        except ProtocolError as error:
            self.close()
            raise ParserCrash(error) from None
