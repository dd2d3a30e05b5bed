"""A toy adapter process that never answers a request holding the trigger.

k2conform run --timeout 3 --adapter 'cmd:python tests/toys/hanging_adapter.py'
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _toy import serve  # noqa: E402


def misbehave() -> None:
    while True:
        time.sleep(3600)


serve("toy-hang", misbehave)
