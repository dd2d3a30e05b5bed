#!/usr/bin/env python3
"""Atheris target `roundtrip` (see k2conform.fuzzing.targets).

python fuzz/fuzz_roundtrip.py [--adapter A] [--delivery M] [--findings DIR] [libFuzzer flags]
[corpus dirs]
k2conform fuzz roundtrip --seconds N
"""

from k2conform.fuzzing.targets import main

if __name__ == "__main__":
    main("roundtrip")
