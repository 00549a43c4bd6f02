"""The platform's one installed command, ``moe-rl`` (``moe_rl.cli``)."""
