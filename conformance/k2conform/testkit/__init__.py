"""A user-facing tool: the test kit for parser authors and the public hypothesis strategies."""

from k2conform.testkit.kit import (
    BaselinedDeviation,
    ConformanceFailure,
    ConformanceKit,
    conformance_tests,
)

__all__ = ["BaselinedDeviation", "ConformanceFailure", "ConformanceKit", "conformance_tests"]
