"""Ringmaster: a Kubernetes operator for ML training and serving on accelerator node pools."""

__version__ = "0.1.0"
