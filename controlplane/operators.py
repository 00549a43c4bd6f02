"""Volcano and the KubeRay operator, installed as the stack's Helm releases install them and run as processes.

Volcano: its chart at the pinned version (``installer/helm/chart/volcano`` of the ``volcano.sh/volcano``
module) is rendered by Helm with the values the stack's release sends, for Kubernetes at the pinned release.
Every rendered object is applied except what only makes sense inside a cluster with a kubelet: the
Deployments run here as processes with their rendered arguments (ConfigMap and Secret mounts become files,
the listen addresses move to free ports on 127.0.0.1, the service-account token comes from the TokenRequest
API); the admission-init Job (it makes the webhook's certificate) is replaced by the test CA; the webhook
configurations keep their rules and ``failurePolicy`` and point at the webhook process by URL. The chart is
the pinned version's (1.15.1), the same version as the binaries (``controlplane.versions.VOLCANO_APIS_SHIM``).

KubeRay: the chart is not in the operator's Go module, so its rendering is restated here for the values the
stack sets (chart 1.7.0 templates/deployment.yaml, ``args``: ``batchScheduler.name`` -> ``--batch-scheduler``,
the default ``featureGates``, ``leaderElectionEnabled``, ``reconcileConcurrency``, ``kubeClient``). Its CRDs are
the module's with the schema of the pinned release laid over them (``workloads/schemas/crds``: what the API
server validates and prunes with on EKS); its RBAC is the module's ``config/rbac``.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import subprocess
import urllib.request
from pathlib import Path

import yaml

from controlplane.cluster import ControlPlane, binary, module_dir
from controlplane.kube import Kube, eventually
from controlplane.processes import Process, free_port, https_ok
from controlplane.versions import kubernetes_version

ROOT = Path(__file__).resolve().parent.parent
VOLCANO_BINARIES = {"volcano-admission": "vc-webhook-manager", "volcano-controllers": "vc-controller-manager",
                    "volcano-scheduler": "vc-scheduler"}
KUBERAY_GATES_1_7_0 = {"RayClusterStatusConditions": True, "RayJobDeletionPolicy": True, "RayMultiHostIndexing": True,
                       "RayServiceIncrementalUpgrade": True, "RayCronJob": False, "RayClusterMTLS": False,
                       "RayClusterNetworkPolicy": False, "RayClusterHistoryServer": False}
"""Chart 1.7.0 values.yaml ``featureGates`` (ray-project/kuberay v1.7.0, helm-chart/kuberay-operator/values.yaml,
blob 174a651b, lines 149-165), rendered as one ``--feature-gates`` (templates/_helpers.tpl ``kuberay.featureGates``)."""
KUBERAY_SERVICE_ACCOUNT = "kuberay-operator"
KUBERAY_VALUES_FOLLOWED = {"batchScheduler", "nodeSelector", "tolerations", "priorityClassName", "image"}
"""The chart values the stack sets: ``batchScheduler`` becomes a flag; the others place the operator's pod
and name its image, which runs here as a process built from the module."""
KUBERAY_VOLCANO_RULE = {"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"],
                        "verbs": ["create", "delete", "get", "list", "update", "watch"]}
"""What chart 1.7.0 adds to the operator's ClusterRole when ``batchScheduler.name`` is ``volcano``
(templates/_helpers.tpl, blob cd6443ec, lines 421-433); the module's ``config/rbac/role.yaml`` has no such rule."""


def load_all(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def helm_template(chart: Path, release: dict) -> list[dict]:
    values = Path(chart.parent / f"{release['name']}-values.json")
    values.write_text(json.dumps(release.get("values") or {}))
    out = subprocess.run([binary("helm"), "template", release["name"], str(chart), "--namespace", release["namespace"],
                          "--kube-version", kubernetes_version(), "--include-crds", "-f", str(values)],
                         capture_output=True, text=True, check=True)
    return load_all(out.stdout)


def wait_established(kube: Kube, crds: list[dict]) -> None:
    for crd in crds:
        name = crd["metadata"]["name"]
        eventually(f"CRD {name} established", lambda: any(
            c["type"] == "Established" and c["status"] == "True" for c in
            ((kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name) or {}).get("status") or {})
            .get("conditions") or []), 30)


# --- Volcano ----------------------------------------------------------------------------------------


class Volcano:
    def __init__(self, cp: ControlPlane, release: dict):
        self.cp, self.release, self.namespace = cp, release, release["namespace"]
        self.work = cp.root / "volcano"
        self.work.mkdir(exist_ok=True)
        chart_copy = self.work / "chart"
        subprocess.run(["cp", "-r", str(module_dir("volcano.sh/volcano") / "installer/helm/chart/volcano"), str(chart_copy)],
                       check=True)
        subprocess.run(["chmod", "-R", "u+w", str(chart_copy)], check=True)
        self.rendered = helm_template(chart_copy, release)
        self.webhook_port = free_port()
        self.webhook_cert = cp.pki.serving("volcano-admission")

    def of_kind(self, kind: str) -> list[dict]:
        return [d for d in self.rendered if d["kind"] == kind]

    def install(self, kube: Kube) -> list[Process]:
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}})
        crds = self.of_kind("CustomResourceDefinition")
        kube.apply_all(crds)
        wait_established(kube, crds)
        skip = {"Deployment", "Job", "CustomResourceDefinition"}
        for obj in self.rendered:
            if obj["kind"] in skip or obj["metadata"]["name"].endswith("admission-init"):
                continue
            kube.apply(self.by_url(obj) if obj["kind"].endswith("WebhookConfiguration") else obj)
        processes = [self.start(d, kube) for d in self.of_kind("Deployment")]
        ca = self.cp.pki.ca
        eventually("Volcano's webhook serving", lambda: self._webhook_up(ca), 60)
        return processes

    def _webhook_up(self, ca: Path) -> bool:
        try:
            https_ok(f"https://127.0.0.1:{self.webhook_port}/healthz", ca)
        except Exception as e:  # 404 is an answer: the TLS server is up
            return "404" in str(e)
        return True

    def sessions(self) -> int:
        """Scheduling sessions vc-scheduler has closed: the count of its ``volcano_e2e_scheduling_latency_milliseconds``
        histogram, observed once per session when it closes (v1.15.1 pkg/scheduler/scheduler.go:143-145; the
        chart's ``--enable-metrics=true`` serves it on ``--listen-address``)."""
        with urllib.request.urlopen(self.scheduler_metrics, timeout=10) as answer:
            text = answer.read().decode()
        return int(float(re.search(r"^volcano_e2e_scheduling_latency_milliseconds_count (\S+)$", text, re.M).group(1)))

    def by_url(self, config: dict) -> dict:
        """The webhook configuration with each webhook called by URL on 127.0.0.1, the test CA trusted."""
        config = copy.deepcopy(config)
        for hook in config["webhooks"]:
            path = hook["clientConfig"].pop("service")["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{self.webhook_port}{path}",
                                    "caBundle": base64.b64encode(self.cp.pki.ca.read_bytes()).decode()}
        return config

    def files(self, pod: dict, container: dict) -> dict[str, str]:
        """Mount path -> local directory, with the ConfigMaps' keys (and the admission certificate) as files."""
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mapped: dict[str, str] = {}
        for mount in container.get("volumeMounts", []):
            local = self.work / "mounts" / mount["mountPath"].strip("/").replace("/", "_")
            local.mkdir(parents=True, exist_ok=True)
            volume = volumes.get(mount["name"], {})
            if "configMap" in volume:
                cm = next(c for c in self.of_kind("ConfigMap") if c["metadata"]["name"] == volume["configMap"]["name"])
                for key, text in (cm.get("data") or {}).items():
                    (local / key).write_text(text)
            if "secret" in volume:
                crt, key = self.webhook_cert
                (local / "tls.crt").write_bytes(crt.read_bytes())
                (local / "tls.key").write_bytes(key.read_bytes())
                (local / "ca.crt").write_bytes(self.cp.pki.ca.read_bytes())
            mapped[mount["mountPath"].rstrip("/")] = str(local)
        return mapped

    def start(self, deployment: dict, kube: Kube) -> Process:
        name = deployment["metadata"]["name"]
        pod = deployment["spec"]["template"]["spec"]
        container = pod["containers"][0]
        mounts = self.files(pod, container)
        args = []
        for arg in container.get("args", []):
            for mount_path, local in mounts.items():
                arg = arg.replace(mount_path, local)
            args.append(arg)
        token = self.cp.service_account_token(self.namespace, pod.get("serviceAccountName") or pod["serviceAccount"],
                                              create=True)
        args += ["--kubeconfig", str(self.cp.kubeconfig(f"{self.namespace}:{name}", token)),
                 f"--healthz-address=127.0.0.1:{free_port()}"]
        if name == "volcano-admission":
            args = [a for a in args if not a.startswith(("--webhook-namespace", "--webhook-service-name"))]
            args += [f"--webhook-url=https://127.0.0.1:{self.webhook_port}", "--listen-address=127.0.0.1",
                     f"--port={self.webhook_port}"]
        else:
            port = free_port()
            args.append(f"--listen-address=127.0.0.1:{port}")
            if name == "volcano-scheduler":
                self.scheduler_metrics = f"http://127.0.0.1:{port}/metrics"
        return self.cp.run(name, [a for a in args if a != "2>&1"], VOLCANO_BINARIES[name])


# --- KubeRay -----------------------------------------------------------------------------------------


def kuberay_args(values: dict, known_gates: set[str]) -> list[str]:
    """What chart 1.7.0's deployment template renders from ``values`` over the chart's defaults. Gates the
    built operator does not know are left out when the chart turns them off (they are off either way). A value
    this restatement does not follow is refused, so a new stack value cannot pass here unrendered."""
    unknown = set(values) - KUBERAY_VALUES_FOLLOWED
    if unknown:
        raise ValueError(f"kuberay-operator values not restated for the test operator: {sorted(unknown)}")
    args = []
    if (values.get("batchScheduler") or {}).get("name"):
        args.append(f"--batch-scheduler={values['batchScheduler']['name']}")
    args += ["--enable-leader-election=true", "--enable-metrics=true", "--reconcile-concurrency=1", "--qps=100.0",
             "--burst=200"]
    unknown_on = [g for g, on in KUBERAY_GATES_1_7_0.items() if on and g not in known_gates]
    if unknown_on:
        raise ValueError(f"the built operator lacks feature gates the chart turns on: {unknown_on}")
    gates = ",".join(f"{g}={str(on).lower()}" for g, on in KUBERAY_GATES_1_7_0.items() if g in known_gates)
    return args + [f"--feature-gates={gates}"]


def known_gates(module: Path) -> set[str]:
    text = (module / "pkg/features/features.go").read_text()
    return set(re.findall(r'featuregate\.Feature = "(\w+)"', text))


def kuberay_crds(module: Path) -> list[dict]:
    """The module's CRDs, each served version's schema replaced by the pinned release's (vendored)."""
    crds = []
    for path in sorted((module / "config/crd/bases").glob("ray.io_*.yaml")):
        crd = load_all(path.read_text())[0]
        vendored = ROOT / "workloads/schemas/crds" / f"{path.stem}.json"
        if vendored.exists():
            schemas = json.loads(vendored.read_text())["versions"]
            for version in crd["spec"]["versions"]:
                if version["name"] in schemas:
                    version["schema"] = {"openAPIV3Schema": schemas[version["name"]]}
        crds.append(crd)
    return crds


def install_kuberay(cp: ControlPlane, kube: Kube, release: dict) -> Process:
    module = module_dir("github.com/ray-project/kuberay/ray-operator")
    namespace = release["namespace"]
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    crds = kuberay_crds(module)
    kube.apply_all(crds)
    wait_established(kube, crds)
    rbac = module / "config/rbac"
    subject = [{"kind": "ServiceAccount", "name": KUBERAY_SERVICE_ACCOUNT, "namespace": namespace}]
    values = release.get("values") or {}
    for name in ("role.yaml", "leader_election_role.yaml", "role_binding.yaml", "leader_election_role_binding.yaml"):
        for obj in load_all((rbac / name).read_text()):
            if obj["kind"] == "ClusterRole" and (values.get("batchScheduler") or {}).get("name") == "volcano":
                obj["rules"].append(KUBERAY_VOLCANO_RULE)
            if obj["kind"] in ("Role", "RoleBinding"):
                obj["metadata"]["namespace"] = namespace
            if "subjects" in obj:
                obj["subjects"] = subject
            kube.apply(obj)
    token = cp.service_account_token(namespace, KUBERAY_SERVICE_ACCOUNT, create=True)
    kubeconfig = cp.kubeconfig(f"{namespace}:{KUBERAY_SERVICE_ACCOUNT}", token)
    return cp.run("kuberay-operator", [
        *kuberay_args(values, known_gates(module)), f"--kubeconfig={kubeconfig}",
        f"--leader-election-namespace={namespace}", f"--metrics-addr=127.0.0.1:{free_port()}",
        f"--health-probe-bind-address=127.0.0.1:{free_port()}", "--log-stdout-encoder=console"])
