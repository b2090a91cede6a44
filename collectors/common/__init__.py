"""Pieces every service shares: window keys, input validation, gRPC transport, backoff."""
