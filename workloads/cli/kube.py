"""The one way the commands reach a cluster (``workloads.cli.runs``, ``workloads.cli.acceptance --apply``,
``workloads.deploy.torchx_miles``): load the kubeconfig, check that the API server answers and serves the
APIs and namespace the command needs, and turn every way of not reaching it into ``NoCluster``, one
line that says what is missing and what to do.

Guarantees: ``connect`` returns an ``ApiClient`` only after the API server has answered; a missing
or unreadable kubeconfig, an unknown context, an API server that refuses, times out or rejects the
credentials, an API group the cluster does not serve (its CRD not installed) and a namespace that
does not exist each raise ``NoCluster``. ``explain`` gives the same one line for an error raised by
a later call, so a command that catches ``CLUSTER_ERRORS`` never ends in a traceback.
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client import ApiException
from kubernetes.config import ConfigException

from workloads.cli.base import one_line

TIMEOUT_S = 15
"""Longest wait for each of ``connect``'s requests (an API server that accepts and never answers)."""


class NoCluster(Exception):
    """No usable cluster: one line naming what is missing and what to do."""

    def __init__(self, message: str):
        super().__init__(one_line(message))


CLUSTER_ERRORS = (NoCluster, ApiException, urllib3.exceptions.HTTPError)
"""What a command catches around its cluster calls and hands to ``explain``."""


@dataclass(frozen=True)
class Api:
    """A custom resource a command uses, and what installs it."""

    group: str
    version: str
    plural: str
    installed_by: str

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}/{self.version}"


STACK = "`pulumi up` of the stack installs it"
RAYJOBS = Api("ray.io", "v1", "rayjobs", f"the KubeRay operator; {STACK}")
PODGROUPS = Api("scheduling.volcano.sh", "v1beta1", "podgroups", f"Volcano; {STACK}")
VOLCANO_JOBS = Api("batch.volcano.sh", "v1alpha1", "jobs", f"Volcano; {STACK}")


def kubeconfig_path() -> str:
    """``$KUBECONFIG`` (a list of files, as kubectl reads it) at call time, else ~/.kube/config."""
    return os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


def _where(context: str | None) -> str:
    return f"context {context!r} of {kubeconfig_path()}" if context else kubeconfig_path()


def _load(context: str | None) -> tuple[client.Configuration, list[str]]:
    """The client configuration of ``context``, and what the credential plugin logged (its failure)."""
    logged: list[str] = []
    collector = logging.Handler()
    collector.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    root = logging.getLogger()
    root.addHandler(collector)  # the client logs an exec plugin failure instead of raising it
    configuration = client.Configuration()
    try:
        config.load_kube_config(config_file=kubeconfig_path(), context=context, client_configuration=configuration)
    except ConfigException as err:
        if context and "Expected object with name" in str(err):
            raise NoCluster(f"no context {context!r} in {kubeconfig_path()}: pass one of its contexts "
                            f"(kubectl config get-contexts) or leave --context out") from None
        raise NoCluster(f"no usable kubeconfig at {kubeconfig_path()} ({err}): write one with `pulumi stack output "
                        f"kubeconfig --show-secrets > kubeconfig` and export KUBECONFIG=$PWD/kubeconfig") from None
    except (OSError, ValueError, yaml.YAMLError) as err:  # unreadable file, malformed YAML or certificate data
        raise NoCluster(f"cannot read the kubeconfig {_where(context)}: {err}") from None
    finally:
        root.removeHandler(collector)
    return configuration, logged


def _status(err: ApiException) -> dict:
    try:
        body = json.loads(err.body or "")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def explain(err: BaseException, host: str = "", credential_log: Sequence[str] = ()) -> str:
    """One line for an error from a cluster call: what happened and what to do."""
    return one_line(_explain(err, host, credential_log))


def _explain(err: BaseException, host: str, credential_log: Sequence[str]) -> str:
    server = f"the API server {host}" if host else "the API server"
    if isinstance(err, NoCluster):
        return str(err)
    if isinstance(err, urllib3.exceptions.HTTPError):
        reason = str(getattr(err, "reason", None) or err).rpartition("): ")[2]  # past urllib3's "HTTPConnection(...)"
        where = f"the API server {err.pool.host}:{err.pool.port}" if getattr(err, "pool", None) else server
        return (f"{where} does not answer ({reason}): check that the cluster exists and that this machine "
                f"reaches its endpoint (kubectl get --raw /version)")
    if not isinstance(err, ApiException):
        return str(err)
    status, message = err.status, _status(err).get("message") or (err.body or "").strip() or err.reason
    details = _status(err).get("details") or {}
    if status == 401:
        plugin = f"; the credential plugin said: {credential_log[-1]}" if credential_log else ""
        return (f"{server} refused the credentials (401 Unauthorized){plugin}: renew them "
                f"(`aws eks get-token --cluster-name <cluster>` must work) or pass another --context")
    if status == 403:
        return f"{server} forbids it (403): {message}; ask a cluster administrator for that access"
    if status == 404 and details.get("kind") == "namespaces":
        return (f"namespace {details.get('name')!r} does not exist: is the team declared in the stack's "
                f"workloads.teams, and has `pulumi up` run since?")
    if status == 404 and not details.get("name"):
        return f"{server} has no such API ({message}): a CRD the command needs is not installed; {STACK}"
    return f"{server} answered {status} {err.reason}: {message}"


@contextmanager
def translated(host: str = "", credential_log: Sequence[str] = ()) -> Iterator[None]:
    """Re-raise every cluster error inside the block as ``NoCluster`` (``explain``'s line)."""
    try:
        yield
    except CLUSTER_ERRORS as err:
        raise NoCluster(explain(err, host, credential_log)) from None


def _require_api(api: client.ApiClient, needed: Api) -> None:
    try:
        served = client.CustomObjectsApi(api).get_api_resources(needed.group, needed.version,
                                                                _request_timeout=TIMEOUT_S)
    except ApiException as err:
        if err.status != 404:
            raise
        served = None
    if served is None or needed.plural not in {r.name for r in served.resources or ()}:
        raise NoCluster(f"the cluster does not serve {needed} (its CRD is not installed): {needed.installed_by}")


def _require_namespace(api: client.ApiClient, namespace: str) -> None:
    try:
        client.CoreV1Api(api).read_namespace(namespace, _request_timeout=TIMEOUT_S)
    except ApiException as err:
        if err.status == 404:
            raise NoCluster(f"namespace {namespace!r} does not exist: is the team declared in the stack's "
                            f"workloads.teams, and has `pulumi up` run since?") from None
        if err.status != 403:  # a team member may not read namespaces: the command's own calls will tell
            raise


def connect(context: str | None = None, apis: Sequence[Api] = (), namespace: str | None = None) -> client.ApiClient:
    """An ``ApiClient`` for ``context`` (default: the kubeconfig's current one) whose API server has
    answered, serves every one of ``apis`` and has ``namespace``; otherwise ``NoCluster``."""
    configuration, logged = _load(context)
    api = client.ApiClient(configuration)
    with translated(configuration.host, logged):
        client.VersionApi(api).get_code(_request_timeout=TIMEOUT_S)
        for needed in apis:
            _require_api(api, needed)
        if namespace:
            _require_namespace(api, namespace)
    return api
