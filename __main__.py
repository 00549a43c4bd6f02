"""Entry point for `pulumi up -s <stack>`: validate the stack's config, then build its graph."""

import pulumi

from stackconfig.stack import CONFIG_KEY, load_stack
from program import ProgramConfig, build

# deploy=True: also refuse placeholder image digests and look up each reservation (program.check_deploy).
build(load_stack(pulumi.get_stack(), pulumi.Config().get_object(CONFIG_KEY), model=ProgramConfig), deploy=True)
