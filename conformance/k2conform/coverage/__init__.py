"""``k2conform coverage``: which of the parsers' own lines and branches the corpus (or a fuzz
corpus) reaches, measured with coverage.py through the one cell path, and how much of the shared
code Kimi can reach at all."""
