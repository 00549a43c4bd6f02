"""GPU and EFA figures of an attempt's nodes from CloudWatch Container Insights (boto3 GetMetricData).

The stack installs the ``amazon-cloudwatch-observability`` add-on (Container Insights with enhanced
observability). Its node metrics, namespace ``ContainerInsights``, dimensions ``ClusterName``,
``InstanceId``, ``NodeName`` (AWS CloudWatch User Guide, "Amazon EKS and Kubernetes Container
Insights with enhanced observability metrics", Container-Insights-metrics-enhanced-EKS, and
"Enhanced Container Insights (Classic) metric reference", container-insights-eks-classic-metrics):

- ``node_gpu_utilization``: percent of GPU time busy, averaged over the node's GPUs (DCGM exporter);
- ``node_efa_rx_bytes``, ``node_efa_tx_bytes``: bytes per second received and sent by the node's EFA
  devices;
- ``node_efa_rdma_read_bytes``, ``node_efa_rdma_write_bytes``: bytes per second received by RDMA read and
  written by RDMA write operations (the GPU-direct traffic of NCCL's net plugin and DeepEP); the same
  tables, and the CloudWatch agent's ``awscontainerinsightreceiver`` EFA metric names.

Guarantees: one query per node and metric, ids derived from the node's position (GetMetricData ids
must match ``^[a-z][a-zA-Z0-9_]*$``); every page (``NextToken``) is read; ``cloudwatch.json`` holds the
results as the API returns them (timestamps as ISO 8601), and ``summarise`` reads only that.
"""

from __future__ import annotations

from datetime import datetime
from statistics import fmean
from typing import Any

NAMESPACE = "ContainerInsights"
GPU_UTIL = "node_gpu_utilization"
EFA_RX = "node_efa_rx_bytes"
EFA_TX = "node_efa_tx_bytes"
RDMA_READ = "node_efa_rdma_read_bytes"
RDMA_WRITE = "node_efa_rdma_write_bytes"
METRICS = (GPU_UTIL, EFA_RX, EFA_TX, RDMA_READ, RDMA_WRITE)


def instance_id(provider_id: str) -> str:
    """``aws:///us-east-1a/i-0abc`` (a Node's ``spec.providerID`` on EKS) -> ``i-0abc``."""
    return provider_id.rsplit("/", 1)[-1]


def queries(cluster: str, nodes: list[tuple[str, str]], period_s: int = 60) -> list[dict]:
    """GetMetricData queries for every (node name, instance id) and metric."""
    out = []
    for i, (name, iid) in enumerate(nodes):
        for metric in METRICS:
            out.append({"Id": f"{metric.removeprefix('node_')}_{i}", "Label": f"{metric} {name}",
                        "MetricStat": {"Metric": {"Namespace": NAMESPACE, "MetricName": metric, "Dimensions": [
                            {"Name": "ClusterName", "Value": cluster}, {"Name": "InstanceId", "Value": iid},
                            {"Name": "NodeName", "Value": name}]}, "Period": period_s, "Stat": "Average"},
                        "ReturnData": True})
    return out


def collect(client: Any, cluster: str, nodes: list[tuple[str, str]], start: datetime, end: datetime,
            period_s: int = 60) -> dict:
    """``cloudwatch.json`` for one attempt: the GetMetricData results over its time window."""
    results: dict[str, dict] = {}
    qs = queries(cluster, nodes, period_s)
    for chunk in range(0, len(qs), 500):  # GetMetricData takes at most 500 queries
        token = None
        while True:
            kwargs = {"MetricDataQueries": qs[chunk:chunk + 500], "StartTime": start, "EndTime": end,
                      "ScanBy": "TimestampAscending"}
            if token:
                kwargs["NextToken"] = token
            page = client.get_metric_data(**kwargs)
            for r in page["MetricDataResults"]:
                got = results.setdefault(r["Id"], {"Id": r["Id"], "Label": r.get("Label", ""), "Timestamps": [],
                                                   "Values": [], "StatusCode": r.get("StatusCode", "")})
                got["Timestamps"] += [t.isoformat() for t in r.get("Timestamps", [])]
                got["Values"] += list(r.get("Values", []))
                got["StatusCode"] = r.get("StatusCode", got["StatusCode"])
            token = page.get("NextToken")
            if not token:
                break
    return {"namespace": NAMESPACE, "cluster": cluster, "periodSeconds": period_s, "start": start.isoformat(),
            "end": end.isoformat(), "MetricDataResults": list(results.values())}


def summarise(doc: dict) -> dict[str, float | None]:
    """Mean GPU utilisation (percent) over the nodes, and mean EFA traffic per node (rx + tx, Gbit/s)."""
    by_metric: dict[str, dict[str, list[float]]] = {m: {} for m in METRICS}
    for r in doc.get("MetricDataResults", []):
        metric, _, node = r.get("Label", "").partition(" ")
        if metric in by_metric and r.get("Values"):
            by_metric[metric].setdefault(node, []).extend(r["Values"])
    gpu = [fmean(v) for v in by_metric[GPU_UTIL].values()]
    nodes = set(by_metric[EFA_RX]) | set(by_metric[EFA_TX])
    efa = [sum(fmean(by_metric[m].get(n) or [0.0]) for m in (EFA_RX, EFA_TX)) * 8 / 1e9 for n in nodes]
    return {"gpu_util": fmean(gpu) if gpu else None, "efa_gbps": fmean(efa) if efa else None}
