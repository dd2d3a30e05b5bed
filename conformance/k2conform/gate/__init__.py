"""Stage 6, the gate: known deviations (the baseline) and the verdict of a run."""
