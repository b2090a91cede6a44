"""Pieces every service shares: window keys, input validation, gRPC transport (the backoff is telemetry/backoff.py)."""
