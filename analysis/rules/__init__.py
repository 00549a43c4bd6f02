"""Every rule in one place: the plan's rules over the recorded graph (``plan``) and the guardrail
checks the policy pack wraps (``fabric``, ``data``), both over the same resource view (``view``)."""
