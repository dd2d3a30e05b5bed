"""Built-in adapters, one per file; each is registered as a ``k2conform.adapters`` entry point."""
