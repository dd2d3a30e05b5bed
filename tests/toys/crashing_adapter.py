"""A toy adapter process that dies (``exit``) or writes garbage (``garbage``) on the trigger.

k2conform run --adapter 'cmd:python tests/toys/crashing_adapter.py exit'
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _toy import serve  # noqa: E402

MODE = sys.argv[1] if len(sys.argv) > 1 else "exit"


def misbehave() -> None:
    if MODE == "garbage":
        print("Traceback? no: just garbage on stdout", flush=True)
        return
    sys.stderr.write("toy: segfault-like death\n")
    sys.stderr.flush()
    os._exit(139)


serve(f"toy-{MODE}", misbehave)
