"""Hand a failed node back for replacement: mark its EC2 instance unhealthy in its Auto Scaling group
(called only by the replacement controller, ``nodes.controller``).

``SetInstanceHealth`` (Amazon EC2 Auto Scaling API, version 2011-01-01) with ``HealthStatus=Unhealthy``
and ``ShouldRespectGracePeriod=false``: the group terminates the instance and launches a replacement
into the same launch template, so into the same Capacity Block or ODCR. Standard library only (it
runs in the controller pod): credentials from EKS Pod Identity (the agent endpoint named by
``AWS_CONTAINER_CREDENTIALS_FULL_URI``, with the token in ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE``,
EKS user guide, pod-id-how-it-works), the request signed with Signature Version 4 (AWS General
Reference, "Create a signed AWS API request"). The pod's role may call it only on the Auto Scaling
groups EKS tags with the stack's cluster (``nodes.component``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from typing import Any, Mapping

SERVICE = "autoscaling"
ENDPOINT_ENV = "AWS_ENDPOINT_URL_AUTO_SCALING"
"""Where to send the call instead of the regional endpoint, as the AWS SDKs read it (``AWS_ENDPOINT_URL_`` and
the service id "Auto Scaling": botocore 1.x ``configprovider.py`` ``_get_service_env_var_name``): a VPC
endpoint's name, or the control-plane tier's fake Auto Scaling."""
CONTENT_TYPE = "application/x-www-form-urlencoded; charset=utf-8"
REGION_LABEL = "topology.kubernetes.io/region"


def instance_id(node: Mapping[str, Any]) -> str:
    """``i-...`` from the node's ``spec.providerID`` (``aws:///<zone>/<instance>``, set by the AWS cloud provider)."""
    provider = node.get("spec", {}).get("providerID", "")
    last = provider.rsplit("/", 1)[-1]
    if not provider.startswith("aws://") or not last.startswith("i-"):
        raise ValueError(f"node {node['metadata']['name']}: providerID {provider!r} names no EC2 instance")
    return last


def set_instance_health_body(instance: str) -> str:
    return urllib.parse.urlencode({"Action": "SetInstanceHealth", "HealthStatus": "Unhealthy",
                                   "InstanceId": instance, "ShouldRespectGracePeriod": "false",
                                   "Version": "2011-01-01"})


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def endpoint(region: str) -> str:
    return os.environ.get(ENDPOINT_ENV) or f"https://{SERVICE}.{region}.amazonaws.com"


def signed_headers(region: str, body: str, creds: Mapping[str, str], now: datetime, host: str | None = None) -> dict[str, str]:
    """The headers of a SigV4-signed POST of ``body`` to Auto Scaling at ``host`` (the regional endpoint's)."""
    host = host or f"{SERVICE}.{region}.amazonaws.com"
    amz_date = now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    headers = {"content-type": CONTENT_TYPE, "host": host, "x-amz-date": amz_date}
    if creds.get("Token"):
        headers["x-amz-security-token"] = creds["Token"]
    names = ";".join(sorted(headers))
    canonical = "\n".join(["POST", "/", "", *(f"{k}:{headers[k]}" for k in sorted(headers)), "", names,
                           hashlib.sha256(body.encode()).hexdigest()])
    scope = f"{amz_date[:8]}/{region}/{SERVICE}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{creds['SecretAccessKey']}".encode(), amz_date[:8]), region), SERVICE),
                "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={creds['AccessKeyId']}/{scope}, "
                                f"SignedHeaders={names}, Signature={signature}")
    return headers


def pod_identity_credentials() -> dict:
    uri = os.environ.get("AWS_CONTAINER_CREDENTIALS_FULL_URI")
    token_file = os.environ.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
    if not uri or not token_file:
        raise RuntimeError("no EKS Pod Identity credentials in the pod (is the replacement controller's association in place?)")
    with open(token_file) as f:
        req = urllib.request.Request(uri, headers={"Authorization": f.read().strip()})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def mark_unhealthy(node: Mapping[str, Any]) -> None:
    """SetInstanceHealth Unhealthy for the node's instance; raises on any refusal."""
    region = node["metadata"].get("labels", {}).get(REGION_LABEL) or os.environ["AWS_REGION"]
    body = set_instance_health_body(instance_id(node))
    url = endpoint(region)
    headers = signed_headers(region, body, pod_identity_credentials(), datetime.now(timezone.utc),
                             urllib.parse.urlsplit(url).netloc)
    req = urllib.request.Request(f"{url.rstrip('/')}/", data=body.encode(), method="POST", headers=headers)
    with urllib.request.urlopen(req, timeout=30):
        pass
