"""Stage 1, the cases: the corpus format and loader, and the generator of edge cases."""
