"""k2conform verify: a candidate against its base (compare.py judges, cli.py runs)."""
