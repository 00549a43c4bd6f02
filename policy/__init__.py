"""Guardrails: the CrossGuard policy pack every stack is previewed with (``rules.ALL``), the
adapter that runs it on graphs recorded under mocks, and the IaC scan of the Kubernetes objects."""
