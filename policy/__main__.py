"""Entry point of the policy pack: `pulumi preview --policy-pack policy -s <stack>`.

Constructing the PolicyPack starts the analyzer's gRPC server and blocks, so nothing else lives
here: the policies are in ``policy/rules.py`` (``ALL``), importable by tests and the plan.
"""

import sys
from pathlib import Path

# The CLI runs this file from the pack's directory; the rules import the platform's components.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

from policy.rules import ALL, PACK_NAME  # noqa: E402

PolicyPack(name=PACK_NAME, enforcement_level=EnforcementLevel.MANDATORY, policies=ALL)
