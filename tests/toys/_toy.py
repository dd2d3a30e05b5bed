"""Shared loop of the toy adapter processes: the reference parser over the adapter
protocol, misbehaving on every request whose output contains TRIGGER."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Callable

from k2conform.adapter.serve import answer
from k2conform.adapter.protocol import PROTOCOL
from k2conform_adapters.reference import ReferenceAdapter

TRIGGER = os.environ.get("K2_TOY_TRIGGER", "Shanghai")


def serve(name: str, misbehave: Callable[[], None]) -> None:
    log = os.environ.get("K2_TOY_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"start {os.getpid()}\n")
        # K2_TOY_HELLO_AFTER_STARTS=N: the hello waits (up to 60 s) until N toys started, so
        # a log shows whether a run started its workers at once or one after another.
        wanted = int(os.environ.get("K2_TOY_HELLO_AFTER_STARTS", "0"))
        if wanted:
            deadline = time.monotonic() + 60
            while _starts(log) < wanted and time.monotonic() < deadline:
                time.sleep(0.1)
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"hello {os.getpid()}\n")
    adapter = ReferenceAdapter()
    print(
        json.dumps(
            {"protocol": PROTOCOL, "name": name, "version": "1.0", "status": "ok", "reason": ""}
        ),
        flush=True,
    )
    for line in sys.stdin:
        if TRIGGER in line:
            misbehave()
        print(json.dumps(answer([adapter], line)), flush=True)


def _starts(log: str) -> int:
    with open(log, encoding="utf-8") as f:
        return sum(line.startswith("start") for line in f)
