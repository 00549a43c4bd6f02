"""Every command that needs a cluster ends with one line and exit code 1 when there is none, through
the real ``kubernetes`` client: no kubeconfig file, an unknown context, an API server that refuses
the connection, does not answer or rejects the credentials, a CRD or a namespace not installed."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import ROOT, send_json, serve

from nodes.__main__ import main as nodes_main
from workloads.cli import kube
from workloads.cli.acceptance import main as acceptance_main
from workloads.cli.runs import main as runs_main
from workloads.cli.torchx import main as torchx_main

VERSION = {"major": "1", "minor": "35", "gitVersion": "v1.35.0", "gitCommit": "0", "gitTreeState": "clean",
           "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25", "compiler": "gc", "platform": "linux/amd64"}


def not_found(details: dict | None = None) -> tuple[int, dict]:
    return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
                 "message": "the server could not find the requested resource", "details": details or {}}


def served(group_version: str, *plurals: str) -> tuple[int, dict]:
    return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": [
        {"name": p, "singularName": "", "namespaced": True, "kind": "X", "verbs": ["get", "list", "create"]}
        for p in plurals]}


class ApiServer:
    """A local HTTP server answering the paths in ``routes`` (status, JSON body); 404 elsewhere."""

    def __init__(self, routes: dict[str, tuple[int, dict]], answer: bool = True):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                if not answer:
                    outer.release.wait(30)  # accept, never answer
                    return
                send_json(self, *routes.get(self.path.split("?")[0].rstrip("/"), not_found()))

            def log_message(self, *args):
                pass

        self.release = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        serve(self.server)

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def kubeconfig(tmp_path, server: str, user: dict | None = None) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "rl",
        "clusters": [{"name": "rl", "cluster": {"server": server}}],
        "contexts": [{"name": "rl", "context": {"cluster": "rl", "user": "rl"}}],
        "users": [{"name": "rl", "user": user or {"token": "t"}}]}))
    return str(path)


def refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed on leaving: nothing listens there


@pytest.fixture
def api_server(tmp_path, monkeypatch):
    started = []

    def start(routes: dict[str, tuple[int, dict]], answer: bool = True, user: dict | None = None) -> ApiServer:
        server = ApiServer(routes, answer)
        started.append(server)
        monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path, server.url, user))
        return server

    yield start
    for server in started:
        server.close()


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_runs_list_without_a_kubeconfig_is_one_line(tmp_path, monkeypatch, capsys):
    """(The command's process boundary, exit code and stderr: tests/test_cli_errors.py.)"""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert runs_main(["list"]) == 1
    assert one_line(capsys) == (
        f"runs: no usable kubeconfig at {tmp_path / 'missing'} (Invalid kube-config file. No configuration found.): "
        "write one with `pulumi stack output kubeconfig --show-secrets > kubeconfig` and export "
        "KUBECONFIG=$PWD/kubeconfig")


def test_an_unknown_context_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path, f"http://127.0.0.1:{refused_port()}"))
    assert runs_main(["list", "--context", "elsewhere"]) == 1
    assert one_line(capsys).startswith("runs: no context 'elsewhere' in ")


def test_a_refused_connection_is_one_line_for_every_command(tmp_path, monkeypatch, capsys):
    port = refused_port()
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path, f"http://127.0.0.1:{port}"))
    expected = f"the API server 127.0.0.1:{port} does not answer ("
    for command, prefix in ((lambda: runs_main(["show", "alpha", "r"]), "runs: "),
                            (lambda: acceptance_main(["p5en-prod", "rollout", "--apply"]), "acceptance: "),
                            (lambda: nodes_main(["status"]), "nodes: "),
                            (lambda: torchx_main(["p5en-shared", "--stack-dir", str(ROOT / "stacks"),
                                                  "--repository", "123456789012.dkr.ecr.us-east-1.amazonaws.com/x"]),
                             "torchx: ")):
        assert command() == 1
        assert one_line(capsys).startswith(prefix + expected)


def test_an_api_server_that_never_answers_is_one_line(api_server, monkeypatch, capsys):
    monkeypatch.setattr(kube, "TIMEOUT_S", 0.1)  # each of urllib3's tries waits this long
    api_server({}, answer=False)
    assert runs_main(["list"]) == 1
    assert "does not answer (" in one_line(capsys)


def test_a_crd_not_installed_is_one_line(api_server, capsys):
    api_server({"/version": (200, VERSION), "/apis/ray.io/v1": not_found()})
    assert runs_main(["list"]) == 1
    assert one_line(capsys) == ("runs: the cluster does not serve rayjobs.ray.io/v1 (its CRD is not installed): the "
                                "KubeRay operator; `pulumi up` of the stack installs it")


def test_a_namespace_not_there_is_one_line(api_server, capsys):
    api_server({"/version": (200, VERSION), "/apis/ray.io/v1": served("ray.io/v1", "rayjobs"),
                "/api/v1/namespaces/team-alpha": not_found({"name": "team-alpha", "kind": "namespaces"})})
    assert runs_main(["list", "--team", "alpha"]) == 1
    assert one_line(capsys).startswith("runs: namespace 'team-alpha' does not exist: is the team declared")


def test_rejected_credentials_are_one_line_naming_the_plugins_failure(api_server, capsys):
    unauthorized = (401, {"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "Unauthorized"})
    api_server({"/version": unauthorized}, user={"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "/nonexistent/aws", "args": ["eks"]}})
    assert runs_main(["list"]) == 1
    line = one_line(capsys)
    assert line.startswith("runs: the API server http://127.0.0.1:") and "refused the credentials (401" in line
    assert "the credential plugin said:" in line and "aws eks get-token" in line


def test_a_later_404_without_a_name_says_a_crd_is_missing():
    from kubernetes.client import ApiException
    err = ApiException(status=404, reason="Not Found", body=json.dumps(not_found()[1]))
    assert "a CRD the command needs is not installed" in kube.explain(err)
    named = ApiException(status=404, reason="Not Found",
                         body=json.dumps(not_found({"name": "team-x", "kind": "namespaces"})[1]))
    assert kube.explain(named).startswith("namespace 'team-x' does not exist")


def test_a_kubeconfig_that_is_not_yaml_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken").write_text("clusters: [unclosed\n")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "broken"))
    assert runs_main(["list"]) == 1
    assert one_line(capsys).startswith(f"runs: cannot read the kubeconfig {tmp_path / 'broken'}: ")
