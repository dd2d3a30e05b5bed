"""k2conform: conformance suite and fuzzing corpus for the Kimi K2 tool-calling format."""

__version__ = "0.1.0"
