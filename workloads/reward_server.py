"""Rule-based reward service for Miles' ``--rm-type remote_rm``.

Miles posts ``{"prompt", "response", "label"}`` (JSON) to ``--rm-url`` and reads the JSON reply as
the sample's reward. This server answers with Miles' own rule-based reward
(``miles.rollout.rm_hub.async_rm``) for the rule in ``RM_TYPE`` (deepscaler, dapo, math, f1, ...),
so rewards are the same as computed in-process, but run on their own (Spot-tolerant) pool.
Stateless: any replica answers any request; ``GET /health`` is the probe.

Runs in the Miles image (aiohttp is a Miles dependency); shipped to the pod as a ConfigMap.
"""

import os
from types import SimpleNamespace

from aiohttp import web

from miles.rollout.rm_hub import async_rm

RM_TYPE = os.environ.get("RM_TYPE", "deepscaler")
PORT = int(os.environ.get("PORT", "8000"))
ARGS = SimpleNamespace(rm_type=RM_TYPE, custom_rm_path=None)


async def reward(request: web.Request) -> web.Response:
    body = await request.json()
    # The attributes Miles v0.1.0's async_rm reads: reward_spec (per-sample override, none here)
    # and tokens (only for the deterministic_random rule).
    sample = SimpleNamespace(prompt=body.get("prompt"), response=body.get("response") or "",
                             label=body.get("label"), metadata=body.get("metadata") or {},
                             reward_spec=None, tokens=body.get("tokens") or [])
    return web.json_response(await async_rm(ARGS, sample))


async def health(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "rmType": RM_TYPE})


def main() -> None:
    app = web.Application(client_max_size=64 * 1024 ** 2)
    app.add_routes([web.post("/reward", reward), web.get("/health", health)])
    web.run_app(app, host="0.0.0.0", port=PORT)


if __name__ == "__main__":
    main()
