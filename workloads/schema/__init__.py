"""The schema of the ``workloads:`` part of a stack, of teams and of run files: types and defaults only."""
