"""Source-based Pulumi plugin: serves this repository's components to programs in any language.

`pulumi package add <this repository>/provider` generates a typed SDK from the schema Pulumi
infers from ``components/multilang.py``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi.provider.experimental import component_provider_host  # noqa: E402

from components.multilang import COMPONENTS, PACKAGE  # noqa: E402

if __name__ == "__main__":
    component_provider_host(COMPONENTS, name=PACKAGE, namespace="rlplatform", version="0.1.0")
