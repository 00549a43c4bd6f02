"""The benchmark: measure on your own cluster what a software profile, an all-to-all backend and a
fabric buy in time, utilisation, resilience and money.

``experiment`` (the experiment file and its attempts), ``runner``, ``deadlines``, ``pinning``, ``faults``
(the FIS fault engine), ``driverlog``, ``collect`` and ``serving`` (submit with a deadline on every
wait, inject, read the driver log, run sglang's serving benchmark, collect; through the run command's
code), ``logparse``, ``artifacts``, ``reaction`` and ``recovery`` (read what was collected, when each
fault struck, what reacted and what it cost), ``checks`` and ``evidence`` (what an attempt must show
before it is compared, and what it shows it ran), ``per_attempt``, ``stats`` and ``figures`` (the
numbers), ``cost`` (prices and the estimate), ``cloudwatch`` (Container Insights via boto3), ``render``
and ``report`` (report.md, report.json, SVG), ``simulate`` and ``noise`` (artifacts for the tests and
the shipped example, hostile on request), ``coverage`` and ``benchmark`` (how well the interval covers;
how long the report takes).
Command: ``python -m bench`` / ``moe-rl-bench``.
"""
