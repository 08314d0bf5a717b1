"""Pure builders: a resource's spec and the operator's decisions -> Kubernetes object dicts."""
