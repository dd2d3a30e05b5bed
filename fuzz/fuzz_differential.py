#!/usr/bin/env python3
"""Atheris target `differential` (see k2conform.fuzzing.targets).

python fuzz/fuzz_differential.py [--adapter A] [--delivery M] [--findings DIR] [libFuzzer flags]
[corpus dirs]
k2conform fuzz differential --seconds N
"""

from k2conform.fuzzing.targets import main

if __name__ == "__main__":
    main("differential")
