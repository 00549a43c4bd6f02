"""CloudWatch through boto3 against moto: the queries find the Container Insights node metrics."""

from datetime import datetime, timedelta, timezone

import boto3
import pytest
from moto import mock_aws

from bench.cloudwatch import EFA_RX, EFA_TX, GPU_UTIL, METRICS, NAMESPACE, collect, instance_id, queries, summarise

NODES = [("ip-10-0-3-10.ec2.internal", "i-0aaa"), ("ip-10-0-3-11.ec2.internal", "i-0bbb")]
START = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1)


def _put(cw, metric: str, node: tuple[str, str], values: list[float]) -> None:
    dims = [{"Name": "ClusterName", "Value": "rl-p5en-shared"}, {"Name": "InstanceId", "Value": node[1]},
            {"Name": "NodeName", "Value": node[0]}]
    cw.put_metric_data(Namespace=NAMESPACE, MetricData=[
        {"MetricName": metric, "Dimensions": dims, "Timestamp": START + timedelta(minutes=5 + i), "Value": v}
        for i, v in enumerate(values)])


@mock_aws
def test_collect_and_summarise_against_moto():
    cw = boto3.client("cloudwatch", region_name="us-east-1")
    _put(cw, GPU_UTIL, NODES[0], [80.0, 60.0])
    _put(cw, GPU_UTIL, NODES[1], [50.0, 50.0])
    for node in NODES:
        _put(cw, EFA_RX, node, [2.5e9, 2.5e9])   # bytes/s
        _put(cw, EFA_TX, node, [1.25e9, 1.25e9])
    # a metric of another cluster must not be counted
    cw.put_metric_data(Namespace=NAMESPACE, MetricData=[{"MetricName": GPU_UTIL, "Timestamp": START + timedelta(minutes=6),
                                                         "Value": 1.0, "Dimensions": [
                                                             {"Name": "ClusterName", "Value": "other"},
                                                             {"Name": "InstanceId", "Value": "i-0aaa"},
                                                             {"Name": "NodeName", "Value": NODES[0][0]}]}])
    doc = collect(cw, "rl-p5en-shared", NODES, START, START + timedelta(minutes=30))
    assert len(doc["MetricDataResults"]) == len(NODES) * len(METRICS)
    got = summarise(doc)
    assert got["gpu_util"] == pytest.approx(60.0)   # node means 70 and 50
    assert got["efa_gbps"] == pytest.approx(30.0)   # (2.5e9 + 1.25e9) B/s x 8 = 30 Gbit/s per node


def test_query_ids_are_valid_and_unique():
    qs = queries("c", NODES * 3)
    ids = [q["Id"] for q in qs]
    assert len(set(ids)) == len(ids) and all(i[0].islower() and i.replace("_", "").isalnum() for i in ids)


def test_instance_id_from_provider_id():
    assert instance_id("aws:///us-east-1a/i-0123456789abcdef0") == "i-0123456789abcdef0"


def test_no_data_gives_none():
    assert summarise({"MetricDataResults": []}) == {"gpu_util": None, "efa_gbps": None}
