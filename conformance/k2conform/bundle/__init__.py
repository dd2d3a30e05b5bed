"""What an installed k2conform carries besides code: the corpus, the pinned parser closures,
the docs the CLI points at, the fuzz dictionary.

The wheel maps the repository's top-level ``corpus/``, ``requirements/``, ``docs/`` and
``fuzz/`` folders into this package (``pyproject.toml``); :mod:`k2conform.resources` finds them
here in an installed package and in the repository in a source checkout.
"""
