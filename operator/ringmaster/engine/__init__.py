"""Ringmaster's performance engine: pure numpy cost models of training and serving.

It imports nothing from Kubernetes, kopf, pydantic or the rest of Ringmaster, so it can be used
(and benchmarked) on its own. Modules: :mod:`hardware` (the catalog), :mod:`collectives`
(all-reduce and reduction-server models), :mod:`training`, :mod:`inference`,
:mod:`efficiency` (every calibrated constant) and :mod:`units`.
"""
