"""The benchmark: measure on your own cluster what a software profile, an all-to-all backend and a
fabric buy in time, utilisation, resilience and money.

``experiment`` (the experiment file and its attempts), ``runner`` and ``faults`` (submit, inject,
collect; through the run command's code), ``logparse`` and ``artifacts`` (read what was collected),
``stats`` and ``figures`` (the numbers), ``cost`` (prices and the estimate), ``cloudwatch``
(Container Insights via boto3), ``render`` and ``report`` (report.md, report.json, SVG), ``simulate``
(artifacts for the tests and the shipped example). Command: ``python -m bench`` / ``moe-rl-bench``.
"""
