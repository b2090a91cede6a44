"""The services: node agent, collectors, root, probes, detectors, and the `telemetry` CLI."""
