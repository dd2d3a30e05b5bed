#!/usr/bin/env python3
"""Atheris target `differential` over Kimi K3 output (see k2conform.fuzzing.targets): the K3
reference is the oracle, the K3 adapters the ones under test.

python fuzz/fuzz_differential_k3.py [--adapter A] [--delivery M] [--findings DIR] [libFuzzer
flags] [corpus dirs]
k2conform fuzz differential --format k3 --seconds N
"""

import sys

from k2conform.fuzzing.targets import main

if __name__ == "__main__":
    main("differential", [sys.argv[0], "--format", "k3", *sys.argv[1:]])
