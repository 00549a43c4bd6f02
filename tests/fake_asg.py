"""The AWS side of a replacement, faked over HTTP for the controller's tests: the EKS Pod Identity agent (it
hands credentials to the pod that shows its token) and Auto Scaling (``SetInstanceHealth``, each request's
SigV4 signature checked by botocore's own signer, the answer in the Query protocol's XML).

Point ``nodes.replace`` at it with ``env()`` (``AWS_CONTAINER_CREDENTIALS_FULL_URI``,
``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE``, ``AWS_ENDPOINT_URL_AUTO_SCALING``)."""

from __future__ import annotations

import json
import urllib.parse
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest import mock

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from conftest import serve

CREDENTIALS = {"AccessKeyId": "ASIAFAKEREPLACE00001", "SecretAccessKey": "fake/secret/for/the/controller/tests0",
               "Token": "fake-session-token", "Expiration": "2099-01-01T00:00:00Z"}
ANSWER = ('<SetInstanceHealthResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><ResponseMetadata>'
          '<RequestId>7c6e177f-f082-11e1-ac58-3714bEXAMPLE</RequestId></ResponseMetadata></SetInstanceHealthResponse>')


class FakeAws:
    """``marked``: the instance ids marked unhealthy, in order; ``refuse``: an error code to answer instead."""

    def __init__(self, directory: Path, region: str = "us-east-1"):
        self.marked: list[str] = []
        self.refuse: str | None = None
        self.region, self.token = region, "pod-identity-token"
        self.token_file = directory / "pod-identity-token"
        self.token_file.write_text(self.token)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status: int, body: str, kind: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # the Pod Identity agent
                if self.path != "/credentials" or self.headers.get("Authorization") != fake.token:
                    return self._send(403, json.dumps({"message": "bad token"}), "application/json")
                self._send(200, json.dumps(CREDENTIALS), "application/json")

            def do_POST(self):  # Auto Scaling
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                problem = fake.check(self.headers, body)
                if problem or fake.refuse:
                    code = "SignatureDoesNotMatch" if problem else fake.refuse
                    return self._send(403 if problem else 400, f"<ErrorResponse><Error><Code>{code}</Code><Message>"
                                      f"{problem or code}</Message></Error></ErrorResponse>", "text/xml")
                fake.marked.append(urllib.parse.parse_qs(body)["InstanceId"][0])
                self._send(200, ANSWER, "text/xml")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        serve(self.server)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def check(self, headers, body: str) -> str | None:
        """None when the request is a SetInstanceHealth signed as botocore signs it with the handed credentials."""
        form = urllib.parse.parse_qs(body)
        if form.get("Action") != ["SetInstanceHealth"] or form.get("HealthStatus") != ["Unhealthy"]:
            return f"not a SetInstanceHealth Unhealthy: {body}"
        req = AWSRequest(method="POST", url=f"{self.url}/", data=body,
                         headers={"Content-Type": headers["Content-Type"]})
        when = datetime.strptime(headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ")  # signed as of the request's own time
        with mock.patch("botocore.auth.get_current_datetime", return_value=when):
            SigV4Auth(Credentials(CREDENTIALS["AccessKeyId"], CREDENTIALS["SecretAccessKey"], CREDENTIALS["Token"]),
                      "autoscaling", self.region).add_auth(req)
        return None if req.headers["Authorization"] == headers["Authorization"] else "signature"

    def env(self) -> dict[str, str]:
        return {"AWS_CONTAINER_CREDENTIALS_FULL_URI": f"{self.url}/credentials",
                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(self.token_file),
                "AWS_ENDPOINT_URL_AUTO_SCALING": self.url, "AWS_REGION": self.region}

    def close(self) -> None:
        self.server.shutdown()
