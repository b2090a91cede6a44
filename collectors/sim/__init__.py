"""`telemetry sim`: a real tree of agent and collector processes fed by simulated ranks using the real SDK."""
