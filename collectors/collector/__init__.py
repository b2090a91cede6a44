"""The collector: one program for rack and cluster tiers; with no parent it is the root."""
