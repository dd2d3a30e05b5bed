#!/usr/bin/env python3
"""Build the seed corpus of the fuzz targets from corpus/ (same as `k2conform fuzz seed-corpus`).

python fuzz/build_seed_corpus.py [OUT_DIR] [--corpus DIR]
"""

import sys

from k2conform.fuzzing.cli import main_seed_corpus

if __name__ == "__main__":
    sys.exit(main_seed_corpus(sys.argv[1:]))
