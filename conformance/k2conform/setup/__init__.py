"""A user-facing tool: ``k2conform setup-parsers``, the pinned parser environments."""
