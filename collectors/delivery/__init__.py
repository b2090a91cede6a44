"""Delivery (DESIGN §5): windows, overlap rules, durability refcounts, retained and resent units."""
