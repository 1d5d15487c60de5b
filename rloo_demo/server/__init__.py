"""Serving many visitors: the public limits, rate gates, the one training slot and its job."""
