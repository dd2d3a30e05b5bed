"""Grammar conformance (``k2conform grammar``, docs/grammar.md): each engine's constrained-decoding
grammar, built by the engine's own code and compiled with its pinned xgrammar, against the same
engine's parser."""
