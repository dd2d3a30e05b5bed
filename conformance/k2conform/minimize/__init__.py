"""A user-facing tool: ``k2conform minimize``, delta debugging of a finding into a corpus case."""
