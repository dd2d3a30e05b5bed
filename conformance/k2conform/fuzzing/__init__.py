"""Fuzzing support: the fuzz-input envelope, the marker-aware mutator, the differential
engine with its disagreement signatures, the atheris targets and the seed-corpus builder.

Nothing here imports atheris at module level except :mod:`k2conform.fuzzing.targets`, so the
rest (and ``k2conform minimize``) works without it.
"""
