"""Shared loop of the toy adapter processes: the reference parser over the adapter
protocol, misbehaving on every request whose output contains TRIGGER."""

from __future__ import annotations

import json
import os
import sys
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
        print(json.dumps(answer(adapter, line)), flush=True)
