"""`telemetry demo`: a local tree, a simulated (or real torchrun) job with faults injected, a live view."""
