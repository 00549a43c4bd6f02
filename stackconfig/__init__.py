"""The stack schema: what a stack file may say (``stack``), the pinned versions (``versions``) and
how stack files are found and read (``files``). Validation only: nothing here creates a resource."""

from .stack import CONFIG_KEY, Pool, Role, StackConfig, StackConfigError, load_stack

__all__ = ["CONFIG_KEY", "Pool", "Role", "StackConfig", "StackConfigError", "load_stack"]
