"""A user-facing tool: the pytest plugin that checks a live engine, and the fake engine it is
tested against."""
