"""Stage 7, the reports: HTML, SVG and Markdown from a run's results."""
