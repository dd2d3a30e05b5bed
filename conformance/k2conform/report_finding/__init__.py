"""A user-facing tool: ``k2conform report-finding``, an upstream-ready bug report with a
reproduction."""
