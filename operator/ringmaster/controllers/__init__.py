"""The kopf controllers: one module per resource (read, decide with pure functions, apply)."""
