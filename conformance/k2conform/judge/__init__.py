"""Stage 4, judging: canonical results compared with the expectation, streams reassembled and
checked."""
