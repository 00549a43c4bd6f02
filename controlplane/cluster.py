"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok's node/pod controller (the envtest pattern, plus the controllers envtest leaves out).

What makes it EKS-like where our objects meet it:
- the admission plugins EKS enables on 1.35 (``EKS_ADMISSION_PLUGINS``), ValidatingAdmissionPolicy among
  them, and ``--authorization-mode=Node,RBAC``;
- identities as EKS gives them: each IAM principal with an access entry is a user named by its ARN with
  the entry's Kubernetes groups (static bearer tokens stand in for the IAM authenticator); an
  ``AmazonEKSClusterAdminPolicy`` association is bound to ``cluster-admin`` (EKS authorizes it through its
  own webhook; the ClusterRoleBinding here grants the same); service accounts get real tokens from the
  TokenRequest API;
- kube-controller-manager with ``--use-service-account-credentials`` (each controller its own identity and
  bootstrap RBAC), so Jobs, DaemonSets, Deployments, garbage collection and PDB status are upstream's.

Nodes are kwok's: Node objects the stack's pools describe (``controlplane.nodes``), heart-beaten and their
bound pods moved through kwok's own "fast" pod stages (running, a Job's pods completed), except deletion: a
deleted pod is gone exactly at its deletion time, when its whole grace period has elapsed
(``POD_DELETE_AT_DEADLINE``), as a kubelet ends a pod whose preStop blocks for the whole grace period.
"""

from __future__ import annotations

import base64
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from kubernetes import client

from controlplane.build import CACHE, bin_dir
from controlplane.pki import Pki
from controlplane.processes import Process, free_port, http_ok, https_ok, wait_for
from controlplane.versions import COMPONENTS

EKS_ADMISSION_PLUGINS = (
    "NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,ResourceQuota,DefaultTolerationSeconds,"
    "NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,PodSecurity,Priority,"
    "StorageObjectInUseProtection,PersistentVolumeClaimResize,ExtendedResourceToleration,RuntimeClass,"
    "CertificateApproval,CertificateSigning,CertificateSubjectRestriction,DefaultIngressClass,"
    "TaintNodesByCondition,ValidatingAdmissionPolicy,ClusterTrustBundleAttest")
"""The admission controllers the Amazon EKS user guide lists as enabled for Kubernetes 1.35 ("View Amazon
EKS platform versions for each Kubernetes version"). ExtendedResourceToleration matters here: a pod that
requests ``nvidia.com/gpu`` or ``vpc.amazonaws.com/efa`` gets a toleration of a taint of that name."""

KWOK_STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
               "pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml")
"""kwok's own stages (``kustomize/stage/`` of the kwok module): nodes Ready and heart-beaten; a bound pod
Running at once, a Job's pods completed. Its "general" pod stages instead pass a pod through four stages of
1 s plus up to 5 s of jitter each (``pod/general/pod-create.yaml`` and the others), which tripled the
planner comparison's time. What the fast stages leave untested is the window a real node has between a pod's
bind and Running (image pull, preflight): Volcano's preempt takes bound pods not yet Running
(actions/preempt/preempt.go:200, api/helpers.go:70-76), its reclaim only Running ones
(actions/reclaim/reclaim.go:189), and KubeRay marks a cluster provisioned only once every pod is ready; here
a bound pod is Running at once, so the planner's assumption that a run placed in one session is a reclaim
victim in the next is agreed with, not tested (docs/design/scheduling.md, "What the plan cannot see"). Neither set's ``pod-delete.yaml``: the fast one removes a deleted
pod at once, the general one after a delay drawn uniformly between 1 s and its deletion time
(``delay.jitterDurationFrom: .metadata.deletionTimestamp``; kwok v0.8.0 pkg/utils/lifecycle/lifecycle.go:
424-456), so a pod's grace period is only an upper bound there."""
POD_DELETE_AT_DEADLINE = {
    "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "pod-delete-at-deadline"},
    "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Pod"},
             "selector": {"matchExpressions": [{"key": ".metadata.deletionTimestamp", "operator": "Exists"},
                                               {"key": ".metadata.finalizers", "operator": "DoesNotExist"}]},
             "delay": {"durationFrom": {"jq": {"expression": ".metadata.deletionTimestamp"}}},
             "next": {"delete": True}}}
"""Our pod deletion stage: the pod is removed exactly at its ``deletionTimestamp`` (= the delete's time + the
pod's grace period), the worst case a claimant can meet, a kubelet whose preStop blocks (the checkpoint
wait) until the grace period ends. kwok v0.8.0's Stage API: ``delay.durationFrom`` read as a time is that
time minus now (pkg/utils/lifecycle/value_duration_from.go:71-110); without a jitter the delay is exactly
that (lifecycle.go:424-438). A delete with grace 0 is removed by the API server itself, as on EKS."""

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
QUOTA_SYNC = "15s"
"""kube-controller-manager's default is 5m. A ResourceQuota that counts a custom resource (``count/rayjobs.ray.io``)
created within 30 s of its CRD is synced before the quota controller's discovery finds the CRD, so its
status lacks the count until the next full resync; until then the API server refuses every RayJob
create in the namespace ("status unknown for quota"). On EKS that is up to 5 minutes after a first
deploy; here the resync is shortened so a test's deploy converges in seconds."""
BOOTSTRAP = "bootstrap"
"""The identity that applies the bootstrap RBAC (``system:masters``, as EKS's own bootstrap of a new cluster);
used for nothing else."""
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


def binary(name: str) -> str:
    for component in COMPONENTS:
        if name in component.binaries:
            path = bin_dir(component) / name
            if not path.is_file():
                raise FileNotFoundError(f"{path} is not built: run `python -m controlplane.build`")
            return str(path)
    raise KeyError(name)


def module_dir(module: str) -> Path:
    """The unpacked source of a built component's module in the cache (its CRDs, charts, stages)."""
    component = next(c for c in COMPONENTS if c.module == module)
    return CACHE / "go" / "mod" / f"{component.module}@{component.version}"


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()


@dataclass
class ControlPlane:
    """Started by ``start``; ``client(user)`` is an ApiClient acting as that user."""

    users: dict[str, User]
    """Key -> identity known to the API server by bearer token."""
    service_cidr: str
    """The Service range, the stack's (``network.serviceIpv4Cidr``, what EKS is given): the API server puts the
    ``kubernetes`` Service at its first address, as EKS's does."""
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="moe-rl-controlplane-")))
    processes: list[Process] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.users = {BOOTSTRAP: User("eks:bootstrap", ("system:masters",)), **self.users}
        self.pki = Pki(self.root / "pki")
        self.logs = self.root / "logs"
        self.tokens = {key: base64.urlsafe_b64encode(os.urandom(24)).decode() for key in self.users}
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"

    # --- processes ---------------------------------------------------------------------------------

    def start(self, bootstrap: list[dict] = ()) -> "ControlPlane":
        """etcd and the API server; ``bootstrap`` applied as ``admin`` (the identities' RBAC the
        controllers need); then the controllers, the scheduler and kwok."""
        from controlplane.kube import Kube
        self._etcd()
        self._apiserver()  # ready to the bootstrap identity
        Kube(self.client(BOOTSTRAP)).apply_all(bootstrap)
        self.run("kube-controller-manager", [
            "--kubeconfig", str(self.kubeconfig("system:kube-controller-manager")),
            "--use-service-account-credentials=true", f"--service-account-private-key-file={self.pki.sa_key}",
            f"--root-ca-file={self.pki.ca}", "--leader-elect=false", "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}", "--controllers=*", "--concurrent-gc-syncs=4",
            f"--resource-quota-sync-period={QUOTA_SYNC}"])
        self.run("kube-scheduler", ["--kubeconfig", str(self.kubeconfig("system:kube-scheduler")),
                                    "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}"])
        self._kwok()
        return self

    def run(self, name: str, args: list[str], binary_name: str | None = None) -> Process:
        process = Process(name, [binary(binary_name or name), *args], self.logs)
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()

    def _etcd(self) -> None:
        client_port, peer_port = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        etcd = self.run("etcd", [
            f"--data-dir={self.root / 'etcd'}", f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}", f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=default=http://127.0.0.1:{peer_port}", "--unsafe-no-fsync", "--log-level=warn"])
        wait_for("etcd health", lambda: http_ok(f"{self.etcd_url}/health"), etcd)

    def _apiserver(self) -> None:
        crt, key = self.pki.serving("kube-apiserver", ("127.0.0.1", "localhost", "kubernetes.default.svc"))
        tokens = self.root / "tokens.csv"
        tokens.write_text("".join(f'{self.tokens[k]},{u.name},{u.name},"{",".join(u.groups)}"\n'
                                  for k, u in self.users.items()))
        apiserver = self.run("kube-apiserver", [
            f"--etcd-servers={self.etcd_url}", "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}", f"--tls-cert-file={crt}", f"--tls-private-key-file={key}",
            f"--client-ca-file={self.pki.ca}", f"--token-auth-file={tokens}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}", f"--service-account-key-file={self.pki.sa_pub}",
            f"--service-account-signing-key-file={self.pki.sa_key}", f"--service-cluster-ip-range={self.service_cidr}",
            "--authorization-mode=Node,RBAC", f"--enable-admission-plugins={EKS_ADMISSION_PLUGINS}",
            "--allow-privileged=true", "--profiling=false", "--endpoint-reconciler-type=none"])
        token = self.tokens[BOOTSTRAP]
        wait_for("kube-apiserver /readyz", lambda: https_ok(f"{self.url}/readyz", self.pki.ca, token), apiserver, 180)

    def _kwok(self) -> None:
        stages = module_dir("sigs.k8s.io/kwok") / "kustomize" / "stage"
        config = self.root / "kwok.yaml"
        config.write_text("---\n".join([*((stages / s).read_text() for s in KWOK_STAGES),
                                        yaml.safe_dump(POD_DELETE_AT_DEADLINE)]))
        self.run("kwok", ["--kubeconfig", str(self.kubeconfig("kwok")), "--config", str(config),
                          f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                          "--cidr=10.64.0.0/12", "--node-ip=10.255.0.1", f"--server-address=127.0.0.1:{free_port()}",
                          "--node-lease-duration-seconds=40"])  # 0 without a KwokConfiguration: no Lease, nodes go Unknown

    # --- clients -----------------------------------------------------------------------------------

    def kubeconfig(self, user: str, token: str | None = None) -> Path:
        """A kubeconfig file acting as ``user`` (a key of ``users``, or any name with ``token``)."""
        path = self.root / "kubeconfigs" / f"{user.replace(':', '_').replace('/', '_')}.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(yaml.safe_dump(kubeconfig(self.url, self.pki.ca, {user: token or self.tokens[user]})))
        return path

    def client(self, user: str = "admin", token: str | None = None) -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host = self.url
        configuration.ssl_ca_cert = str(self.pki.ca)
        configuration.api_key = {"authorization": f"Bearer {token or self.tokens[user]}"}
        return client.ApiClient(configuration)

    def service_account_token(self, namespace: str, name: str, pod: client.V1Pod | None = None,
                              create: bool = False) -> str:
        """A real token of ``namespace/name`` from the TokenRequest API; bound to ``pod`` as the kubelet's
        projected token is, so the API server adds the pod's node name to the user's extra
        (``authentication.kubernetes.io/node-name``). ``create``: the account is the harness's own (an
        operator's, which its chart would make); otherwise a missing account is the stack's defect and fails."""
        core = client.CoreV1Api(self.client(BOOTSTRAP))
        if create:
            try:
                core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
            except client.ApiException as e:
                if e.status != 409:
                    raise
        request = {"spec": {"expirationSeconds": 86400, "audiences": [SERVICE_ACCOUNT_ISSUER]}}
        if pod is not None:
            request["spec"]["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name,
                                                 "uid": pod.metadata.uid}
        return core.create_namespaced_service_account_token(name, namespace, request).status.token


def kubeconfig(server: str, ca: Path, users: dict[str, str]) -> dict:
    """A kubeconfig with one context per user, named as the user; the first is current."""
    cluster = {"name": "test", "cluster": {"server": server,
                                           "certificate-authority-data": base64.b64encode(ca.read_bytes()).decode()}}
    return {"apiVersion": "v1", "kind": "Config", "clusters": [cluster],
            "users": [{"name": u, "user": {"token": t}} for u, t in users.items()],
            "contexts": [{"name": u, "context": {"cluster": "test", "user": u}} for u in users],
            "current-context": next(iter(users))}

