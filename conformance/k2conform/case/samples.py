"""The ids of the cases ``k2conform grammar`` draws (walks of an engine's grammar): what the
lane writes and what the reports read to name the command that draws them again."""

from __future__ import annotations

import re

SAMPLE_CLASS = "GRAMMAR.sample"
_SAMPLE_ID = re.compile(r"y_sample_[\w-]+?_\d+_of_([yni]_.+)")


def sample_id(engine: str, draw: int, source: str) -> str:
    return f"y_sample_{engine}_{draw}_of_{source}"


def source_of(case_id: str) -> str:
    """The corpus case a sample's grammar was built for (the case itself for a corpus case):
    what ``k2conform grammar --case`` selects to draw the same walks again."""
    found = _SAMPLE_ID.fullmatch(case_id)
    return found.group(1) if found else case_id
