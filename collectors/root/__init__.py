"""The root: finalises windows, persists them, serves the JSON API (and, later, detectors and /metrics)."""
