"""Which inputs a costly lane last passed over in full, so .ci/run knows when a guard is enough.

A lane too long for every CI run (the release lanes: 41 environments x the whole corpus; the
real vLLM server lane: the whole corpus through a served model on CPU; the extra parsers' lane:
seven parsers in their own environments x the whole corpus) runs in full when one of its
inputs changed since its last full pass, and as a guard otherwise (docs/testing.md).  Its
inputs are the corpus, the adapter glue, the lane's baselines and the pinned closures;
``.ci/lanes.json`` holds their digest as of the last full pass, written by the lane's make
target when it passes, and committed with the change that needed it.

    python3 .ci/lanes.py check LANE    # exit 0: inputs unchanged; 1: run it in full
    python3 .ci/lanes.py record LANE   # after a full pass: store the inputs' digest
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAMPS = ROOT / ".ci" / "lanes.json"
#: lane -> the files and folders whose content its results depend on beyond the harness
#: (the harness itself is pinned cell for cell by the developer lane's snapshots)
#: The K3 reference adapter: no stamped lane runs it (a run's verdicts come from the cases).
_K3_REFERENCE = (":(exclude)adapters/k2conform_adapters/reference_k3.py",)
#: The engines' K3 glue and SGLang's engine stop strings (``sglang_stop``, which
#: ``sglang-server-k3`` shares): the release lanes run them in the releases with kimi_k3; the
#: server lane runs K3 through vllm-server-k3 (vllm_server.py).
_ENGINE_K3 = tuple(
    f":(exclude)adapters/k2conform_adapters/{name}.py"
    for name in ("vllm_k3", "sglang_k3", "sglang_stop")
)
#: SGLang's serving code with a scripted engine (``sglang-server``, ``sglang-server-k3``): opt-in,
#: held to the in-process SGLang adapters by the developer lane; no stamped lane runs it.
_SGLANG_SERVING = tuple(
    f":(exclude)adapters/k2conform_adapters/{name}.py"
    for name in ("sglang_server", "sglang_server_k3")
)
#: What no lane plans a cell for: the live-engine plugin's probes (``run`` takes completion
#: cases only), the findings catalogue (the corpus loader skips it: ``catalogue check``
#: replays it, docs/findings-catalogue.md) and the reproduction scripts' drivers.
_NOT_RUN = (
    ":(exclude)corpus/probes",
    ":(exclude)corpus/findings/catalogue",
    # report-finding's standalone scripts: no cell runs them (tests/test_repro_scripts.py does)
    ":(exclude)adapters/k2conform_adapters/repro",
    ":(exclude)adapters/k2conform_adapters/reproducible.py",
)
#: The real vLLM server's glue: only the server lane runs it.
_SERVER_GLUE = tuple(
    f":(exclude)adapters/k2conform_adapters/{name}.py"
    for name in ("vllm_server", "vllm_forcing", "vllm_model", "vllm_hf_tokenizer")
)
#: The extra parsers' glue: only the extra parsers' lane runs it.
_EXTRA_GLUE = tuple(
    f":(exclude)adapters/k2conform_adapters/{name}.py"
    for name in (
        "aphrodite_parser",
        "easydel_parser",
        "lmdeploy_parser",
        "mlx_lm_parser",
        "ms_swift_parser",
        "vllm_mlx_parser",
        "sglang_kt_parser",
    )
)
#: The in-process engines' Kimi K2 glue: the server lane's adapters (vllm_server.py's) import
#: none of it (tests/test_lanes.py holds them to that).
_IN_PROCESS_K2 = tuple(
    f":(exclude)adapters/k2conform_adapters/{name}.py"
    for name in ("vllm_parser", "vllm_legacy_parser", "sglang_parser")
)
#: The request-level cases plan no cell of an in-process adapter (tests/test_request_fate.py)
#: nor of a ``cmd:`` one (``run`` plans before any hello).
_SERVER_ONLY_CASES = (":(exclude)corpus/requests",)
#: The K3 cases plan no cell of a K2 adapter (``Adapter.formats``).
_K3_CASES = (":(exclude)corpus/k3",)
INPUTS = {
    "releases": [
        "corpus",
        *_NOT_RUN,
        *_SERVER_ONLY_CASES,
        "adapters/k2conform_adapters",
        *_K3_REFERENCE,
        *_SGLANG_SERVING,
        *_SERVER_GLUE,
        *_EXTRA_GLUE,
        "baseline-releases-vllm.json",
        "baseline-releases-sglang.json",
        "requirements",
    ],
    "servers": [
        "corpus",
        *_NOT_RUN,
        "adapters/k2conform_adapters",
        *_K3_REFERENCE,
        *_ENGINE_K3,
        *_SGLANG_SERVING,
        *_IN_PROCESS_K2,
        *_EXTRA_GLUE,
        "baseline-servers.json",
        "requirements",
    ],
    # the reference and the extra parsers: every K2 in-process glue, an engine's too (an
    # extra parser may reuse it, as sglang-kt does SGLang's)
    "extra": [
        "corpus",
        *_NOT_RUN,
        *_SERVER_ONLY_CASES,
        *_K3_CASES,
        "adapters/k2conform_adapters",
        *_K3_REFERENCE,
        *_ENGINE_K3,
        *_SGLANG_SERVING,
        *_SERVER_GLUE,
        "baseline-extra.json",
        "requirements",
    ],
}


def digest(lane: str) -> str:
    """sha256 over the path and bytes of every tracked input file (what a fresh clone has; an
    untracked file, such as a generated reproduction script, is not an input), in path order."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", *INPUTS[lane]],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    hasher = hashlib.sha256()
    for name in sorted(filter(None, listed.split(b"\0"))):
        hasher.update(name + b"\0")
        hasher.update((ROOT / name.decode()).read_bytes())
    return hasher.hexdigest()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("check", "record") or argv[1] not in INPUTS:
        print(f"usage: lanes.py check|record {'|'.join(INPUTS)}", file=sys.stderr)
        return 2
    command, lane = argv
    stamps = json.loads(STAMPS.read_text()) if STAMPS.is_file() else {}
    now = digest(lane)
    if command == "record":
        stamps[lane] = now
        STAMPS.write_text(json.dumps(stamps, indent=1, sort_keys=True) + "\n")
        print(f"{lane}: inputs recorded as passed in full ({now[:12]}); commit .ci/lanes.json")
        return 0
    if stamps.get(lane) == now:
        print(f"{lane}: inputs unchanged since its last full pass ({now[:12]}): the guard runs")
        return 0
    print(f"{lane}: inputs changed since its last full pass: the whole lane runs")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
