"""Stage 5, the run: the matrix of cells over worker processes."""
