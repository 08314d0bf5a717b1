"""Pool profiles (PoolProfile, issue 47): what a pool's own hosts sustain, measured there.

- :mod:`ringmaster.profiling.results`: the result one measurement pod posts (the schema).
- :mod:`ringmaster.profiling.payload`: the measurement itself, one file that needs only Python,
  PyTorch and NCCL, mounted into the user's image from a ConfigMap.
- :mod:`ringmaster.profiling.aggregate`: a pool's results together: medians, hosts that fall
  short, the comparison with the catalog.
- :mod:`ringmaster.engine.profiled`: the ceilings a profiled pool is planned on.
"""
