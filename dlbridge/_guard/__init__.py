"""``@dlbridge.guard``: mixed-framework functions."""
