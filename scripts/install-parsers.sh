#!/usr/bin/env bash
# Install the extra real parsers, one virtual environment each under .venvs/<name>, with
# their pinned import closure (requirements/<name>.txt, installed --no-deps) and
# k2conform itself (editable), so each runs in the matrix through the adapter protocol:
#
#   scripts/install-parsers.sh                  # every extra parser
#   scripts/install-parsers.sh lmdeploy mlx-lm  # some of them
#   k2conform run --adapter reference \
#       --adapter 'lmdeploy=cmd:.venvs/lmdeploy/bin/k2conform serve-adapter lmdeploy'
#
# `scripts/install-parsers.sh --list` prints the names; `--adapters` prints one
# `--adapter=NAME=cmd:...` option per line for every installed one:
#
#   mapfile -t extra < <(scripts/install-parsers.sh --adapters)
#   k2conform run --adapter reference --adapter vllm --adapter sglang "${extra[@]}"
# Environment: PYTHON (default python3), VENVS (default .venvs).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENVS=${VENVS:-.venvs}

# name -> adapter served in that venv.  requirements/<name>.txt is the pinned closure.
declare -A ADAPTER=(
  [aphrodite]=aphrodite
  [lmdeploy]=lmdeploy
  [mlx-lm]=mlx-lm
)
# The old regex-based vLLM parsers (the vllm-legacy adapter: vLLM 0.10-0.11), one venv
# per release.  0.12.0 is not listed: the vllm-legacy glue does not drive it.
if [ -f adapters/vllm_legacy_parser.py ]; then
  for release in 0.10.0 0.11.0; do
    if [ -f "requirements/vllm-$release.txt" ]; then ADAPTER[vllm-$release]=vllm-legacy; fi
  done
fi
NAMES=$(printf '%s\n' "${!ADAPTER[@]}" | sort)

case "${1:-}" in
  --list) echo "$NAMES"; exit 0 ;;
  --adapters)
    for name in $NAMES; do
      if [ -x "$VENVS/$name/bin/k2conform" ]; then
        printf -- "--adapter=%s=cmd:%s/bin/k2conform serve-adapter %s\n" "$name" "$VENVS/$name" "${ADAPTER[$name]}"
      fi
    done
    exit 0 ;;
esac

selected=("$@")
[ ${#selected[@]} -gt 0 ] || selected=($NAMES)
for name in "${selected[@]}"; do
  if [ -z "${ADAPTER[$name]:-}" ]; then
    echo "unknown parser '$name' (known: $(echo $NAMES))" >&2
    exit 2
  fi
  venv="$VENVS/$name"
  stamp="$venv/.k2conform-installed"
  if [ -f "$stamp" ] && [ "$stamp" -nt "requirements/$name.txt" ] && [ "$stamp" -nt pyproject.toml ]; then
    echo "== $name: up to date ($venv)"
    continue
  fi
  echo "== $name: $venv"
  "$PYTHON" -m venv "$venv"
  log="$venv/install.log"
  {
    "$venv/bin/pip" install --upgrade pip
    # "# base: FILE" on a requirements file's first line: install requirements/FILE first.
    base=$(sed -n '1s/^# base: *//p' "requirements/$name.txt")
    if [ -n "$base" ]; then "$venv/bin/pip" install --no-deps -r "requirements/$base"; fi
    "$venv/bin/pip" install --no-deps -r "requirements/$name.txt"
    "$venv/bin/pip" install -e .
  } > "$log" 2>&1 || { tail -20 "$log" >&2; echo "installing $name failed; see $log" >&2; exit 1; }
  "$venv/bin/k2conform" list-adapters | grep -E "^${ADAPTER[$name]}( |$)" || true
  touch "$stamp"
done
