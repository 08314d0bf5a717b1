"""Ringmaster's performance engine: pure numpy cost models of training and serving.

It imports nothing from Kubernetes, kopf, pydantic or the rest of Ringmaster, so it can be used
(and benchmarked) on its own. Modules: :mod:`hardware` (the catalog), :mod:`collectives`
(what NCCL and XLA run, and the reduction server; other modules call
``collectives.intra_host_collective`` for tensor parallelism and
``collectives.inter_host_collective`` for data parallelism), :mod:`training`, :mod:`inference`,
:mod:`efficiency` (every calibrated constant) and :mod:`units`.
"""
