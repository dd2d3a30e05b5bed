"""The engine plugin against a server of the server lane's guard, inside its session.

``make server-lane-guard SERVER_THEN="python tests/server_plugin_runs.py OUT"`` runs this last
in each server's session (``server-runs`` appends the server's name), so the plugin meets the
servers the guard started instead of two more (a start is about a minute on 2 cores).  Each
plugin run's stdout and exit status go to ``OUT/plugin-SERVER-LABEL.json`` for
tests/test_vllm_server.py to judge; this script itself exits 0, so the guard's status stays
its gate's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

from k2conform_adapters import vllm_server

ROOT = Path(__file__).resolve().parents[1]
#: the probe the K2 runs are given, and its copy whose replay breaks the call's arguments
PROBE = ROOT / "corpus" / "probes" / "y_probe_single_call.json"
BROKEN_PROBE_ID = "y_probe_broken_arguments"


def plugin(cwd: Path, url: str, *args: str) -> dict:
    """One pytest session of the engine plugin against ``url``, from ``cwd``."""
    cwd.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
            "--rootdir", str(cwd), "--k2-engine-url", url,
            "--k2-model", vllm_server.MODEL_NAME, "--k2-script", *args,
        ],
        capture_output=True, text=True, timeout=900, cwd=cwd,
    )  # fmt: skip
    return {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr[-4000:]}


def k2_runs(out: Path, url: str) -> dict[str, dict]:
    """The clean single-call probe, then the same corpus with a copy whose arguments are cut."""
    corpus = out / "k2-corpus"
    (corpus / "probes").mkdir(parents=True, exist_ok=True)
    probe = json.loads(PROBE.read_text())
    (corpus / "probes" / PROBE.name).write_text(json.dumps(probe))
    broken = dict(
        probe,
        id=BROKEN_PROBE_ID,
        replay=[probe["replay"][0].replace('"Beijing"}', '"Beijing"')] + probe["replay"][1:],
    )
    if broken["replay"] == probe["replay"]:  # the probe changed: the copy would not be broken
        raise ValueError(f"{PROBE.name}'s first replay piece no longer ends its arguments")
    args = ("--k2-corpus", str(corpus), "-k", "probe or summary")
    clean = plugin(out / "k2-clean", url, *args)
    (corpus / "probes" / f"{BROKEN_PROBE_ID}.json").write_text(json.dumps(broken))
    return {"clean": clean, "broken": plugin(out / "k2-broken", url, *args)}


def k3_runs(out: Path, url: str) -> dict[str, dict]:
    """Every K3 probe of the shipped corpus."""
    return {"k3": plugin(out / "k3", url, "-v", "--k2-format", "k3")}


RUNS = {"vllm-server": k2_runs, "vllm-server-k3": k3_runs}


def main(out: Path, server: str) -> None:
    url = os.environ[vllm_server.env_name(server, "URL")]
    try:
        results = RUNS[server](out / server, url)
    except Exception:  # noqa: BLE001 - the test reading the file says what went wrong
        results = {"error": {"returncode": None, "stdout": "", "stderr": traceback.format_exc()}}
    for label, result in results.items():
        (out / f"plugin-{server}-{label}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
