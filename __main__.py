"""Entry point for `pulumi up -s <stack>`: validate the stack's config, then build its graph."""

import pulumi

from stackconfig.stack import CONFIG_KEY
from program import build
from workloads.checks import gate

# deploy=True: also refuse what the image inventory cannot pull, example principals, and what AWS says of
# each reservation and of the running control plane (program.check_deploy).
build(gate.load(pulumi.get_stack(), pulumi.Config().get_object(CONFIG_KEY)), deploy=True)
