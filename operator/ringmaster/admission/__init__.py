"""Gang admission, pure (no kopf, no I/O): who starts, where, and in which order.

- :mod:`ringmaster.admission.snapshot`: the cluster as admission sees it, kept incrementally from
  node, pod and PriorityClass events (a cache in Kueue's terms).
- :mod:`ringmaster.admission.cycle`: one ordered pass over the waiting gangs that returns a
  decision for each (admit on a pool, or wait with a reason and the numbers). The gang check,
  :func:`ringmaster.admission.cycle.check_gang`, is the one place that decides whether a gang fits.
- :mod:`ringmaster.admission.pools`: which pools can take a gang at all, in preference order.
"""
