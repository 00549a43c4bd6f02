"""What runs on and against the cluster's GPU nodes: the burn-in that proves each new node before it
takes work (``burn_in`` plans it per pool, ``render`` and ``policy`` make its objects, ``component``
registers them, ``agent`` runs on the node, ``watch`` re-tests a passed node that rebooted or that a
run's preflight refused, ``controller`` replaces hardware failures within a per-pool breaker), and the
``python -m nodes`` command (status, plan, retest, reset-breaker)."""
