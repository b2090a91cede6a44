"""The node agent: ranks stream to it over a Unix socket; it folds, seals and forwards per-step summaries."""
