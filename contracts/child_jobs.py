"""The protocol of the contract stage's child checkers (``trainer_args.py``, ``megatron_args.py``), each run as a
script in an environment of its own: a JSON list of jobs on stdin, the list of their results as the last line of
stdout (whatever upstream's code printed before it is left above)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable


def serve(check: Callable[[dict], dict]) -> int:
    results = [check(job) for job in json.load(sys.stdin)]
    sys.stdout.write("\n" + json.dumps(results) + "\n")
    return 0
