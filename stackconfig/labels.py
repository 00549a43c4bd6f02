"""The labels every platform node carries: which pool it belongs to and that pool's role.

Constants only, importing nothing, so that code that reads nodes offline (the benchmark report)
need not import the stack schema."""

LABEL_PREFIX = "rl.platform"
ROLE_LABEL = f"{LABEL_PREFIX}/role"
POOL_LABEL = f"{LABEL_PREFIX}/pool"
