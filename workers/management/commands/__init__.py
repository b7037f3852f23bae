"""runworker and produce."""
