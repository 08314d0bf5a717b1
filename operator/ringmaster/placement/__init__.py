"""Node-pool discovery, fit and gang checks, pod placement: pure functions."""
