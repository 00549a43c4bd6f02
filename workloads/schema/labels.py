"""The labels that mark a submitted run's objects: which run, and which attempt of it.

Constants only, importing nothing, so that code that reads a run's objects offline (the benchmark
report) need not import the renderers and, through them, the components and ``pulumi_aws``."""

RUN_LABEL = "rl.platform/run"
ATTEMPT_LABEL = "rl.platform/attempt"
