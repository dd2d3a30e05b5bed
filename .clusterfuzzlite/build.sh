#!/bin/bash -eu
# Builds the atheris targets of fuzz/ as OSS-Fuzz and ClusterFuzzLite run them (docs/fuzzing.md):
# one executable per target in $OUT (compile_python_fuzzer: PyInstaller, one file), and beside
# each its libFuzzer options, seed corpus and dictionary (fuzz/build_seed_corpus.py --service).
# K2FUZZ_TARGETS (default: all four: k2conform.fuzzing.targets.SERVICE_TARGETS) picks targets;
# all but the reference target need the pinned vLLM + SGLang closure (requirements/parsers.txt,
# ~1.5 GB with the CPU torch). differential_k3 is the differential target over Kimi K3 output.
cd "$SRC/k2conform"
targets=${K2FUZZ_TARGETS:-reference differential roundtrip differential_k3}

python3 -m pip install .
if [[ "$targets" != "reference" ]]; then
  # As `k2conform setup-parsers parsers` does, into the image's Python; torch==2.13.0 is the
  # CPU wheel (requirements/parsers.txt says where it comes from).
  PIP_EXTRA_INDEX_URL=${PIP_EXTRA_INDEX_URL:-https://download.pytorch.org/whl/cpu} \
    python3 -m pip install --no-deps -r requirements/parsers.txt
fi

# What PyInstaller cannot see by itself: the adapters come from entry points (metadata), the
# stand-in tokenizer and chat template are package data, vLLM and SGLang import their parsers
# by name, and xgrammar loads its bindings through tvm_ffi, not as an extension module.
# The reference target leaves the parsers out (else it carries torch too: 1 GB instead of 39 MB).
bundle=(--collect-data k2conform --copy-metadata k2conform)
reference=(--hidden-import k2conform_adapters.reference --exclude-module torch
           --exclude-module vllm --exclude-module sglang)
parsers=(--collect-submodules k2conform_adapters
         --collect-submodules vllm.parser --collect-submodules vllm.tool_parsers
         --collect-submodules vllm.reasoning --collect-submodules sglang.srt.function_call
         --collect-submodules sglang.srt.parser --copy-metadata vllm --copy-metadata sglang
         --copy-metadata torch --copy-metadata transformers
         --collect-binaries xgrammar --collect-binaries tvm_ffi)
for target in $targets; do
  if [[ "$target" == "reference" ]]; then
    compile_python_fuzzer "fuzz/fuzz_$target.py" "${bundle[@]}" "${reference[@]}"
  else
    compile_python_fuzzer "fuzz/fuzz_$target.py" "${bundle[@]}" "${parsers[@]}"
  fi
done

python3 fuzz/build_seed_corpus.py --service "$OUT"
