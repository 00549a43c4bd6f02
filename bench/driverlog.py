"""The driver log of an attempt, read incrementally from where the launcher tees it
(``workloads.pod.miles_launcher.driver_log_path``: the run's checkpoint directory on FSx, exported to the
team's bucket prefix).

- While the attempt's head runs, the new bytes since ``offset`` are read through one exec in it
  (``tail -c +<offset+1> <file> | head -c <CHUNK> | base64``): bounded output, never the whole log
  again, and as base64, since the exec stream is text decoded frame by frame (the kubernetes client's
  ``WSClient`` decodes each frame as UTF-8 with replacement), which would turn a character cut at a
  chunk or frame boundary into U+FFFD and the byte offset after it into a guess.
- A node that disappeared takes its pods, not the file: a head lost with its node ends the attempt
  (``render.runs``: no head restart), and the rest is read from the bucket.
- Once no pod of the attempt is left (its cluster is deleted 60 s after the job ends), the rest is read
  from the exported copy in S3 (``s3`` = a boto3 S3 client, ``bucket``, ``key_of``: the object key of
  the file), with a ``Range`` request from the same offset.

Guarantees: ``read`` returns only new text and advances the offset by exactly the bytes it read; a
multi-byte character cut at the end of a read is held until the next (``pending``), never replaced; a
failed read raises ``LogUnavailable`` saying where and why (an exec that timed out or failed or whose
output is not base64, no pod and no bucket to read from), never an empty string in place of a log.
"""

from __future__ import annotations

import base64
import binascii
import codecs
from collections.abc import Callable
from dataclasses import dataclass, field

from workloads.render.common import RAY_NODE_TYPE_LABEL
from workloads.render.runs import ATTEMPT_LABEL, RUN_LABEL
from workloads.render.teams import namespace_of
from workloads.cli.runs_client import RunClient

CHUNK = 8 << 20
"""Bytes read per exec at most (8 MiB): one poll's worth of perf lines many times over."""


class LogUnavailable(LookupError):
    """The driver log could not be read; the message names the file, the offset and the cause."""


@dataclass
class DriverLog:
    """One attempt's driver log file (``path`` inside the pods) and how far it has been read."""

    team: str
    run: str
    attempt: int
    path: str
    offset: int = 0
    s3: object | None = None
    bucket: str | None = None
    key_of: Callable[[str], str] | None = None
    pending: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))
    """UTF-8 decoding across reads: the bytes of a character cut at the end of one read wait for the next."""

    def _pods(self, api: RunClient) -> list[str]:
        pods = api.core.list_namespaced_pod(namespace_of(self.team), label_selector=(
            f"{RUN_LABEL}={self.run},{ATTEMPT_LABEL}={self.attempt},{RAY_NODE_TYPE_LABEL}=head")).items
        return [p.metadata.name for p in pods if p.status and p.status.phase == "Running"]

    def read(self, api: RunClient) -> str:
        """The bytes written since the last read (decoded, invalid UTF-8 replaced)."""
        pods = self._pods(api)
        if pods:
            data = self._exec(api, pods[0])
        elif self.s3 is not None and self.bucket and self.key_of is not None:
            data = self._s3()
        else:
            raise LogUnavailable(f"{self.path} at byte {self.offset}: no running head of attempt {self.attempt} of run "
                                 f"{self.run} and no bucket to read the exported copy from (bench run --log-bucket)")
        self.offset += len(data)
        return self.pending.decode(data)

    def read_all(self, api: RunClient) -> str:
        """Everything not read yet (several chunks when it is long)."""
        parts = []
        while part := self.read(api):
            parts.append(part)
        return "".join(parts)

    def _exec(self, api: RunClient, pod: str) -> bytes:
        command = ["sh", "-c", f'tail -c +{self.offset + 1} "$1" 2>/dev/null | head -c {CHUNK} | base64', "read-log",
                   self.path]
        code, out = api._exec(self.team, pod, command)
        if code is None:
            raise LogUnavailable(f"{self.path} at byte {self.offset}: the exec in pod {pod} did not end in time")
        if code != 0:
            raise LogUnavailable(f"{self.path} at byte {self.offset}: the exec in pod {pod} exited {code}")
        try:
            return base64.b64decode("".join(out.split()), validate=True)
        except (binascii.Error, ValueError):
            raise LogUnavailable(f"{self.path} at byte {self.offset}: the exec in pod {pod} did not answer base64") from None

    def _s3(self) -> bytes:
        key = self.key_of(self.path)
        try:
            got = self.s3.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={self.offset}-")
        except Exception as err:  # botocore ClientError: InvalidRange when nothing new, NoSuchKey
            code = getattr(err, "response", {}).get("Error", {}).get("Code")
            if code == "InvalidRange":
                return b""
            raise LogUnavailable(f"s3://{self.bucket}/{key} at byte {self.offset}: {code or err}") from None
        return got["Body"].read()
