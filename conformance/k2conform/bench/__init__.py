"""A user-facing tool: ``k2conform bench``, speed measured side by side."""
