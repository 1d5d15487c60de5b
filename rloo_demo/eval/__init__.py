"""Judging a policy's text: held-out evaluation of base against trained, and the collapse judges."""
