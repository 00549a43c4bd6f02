"""Nodes priced by how they are bought (bench.cost): a contract price for Capacity Blocks and ODCRs,
EC2's Spot price history for Spot (against moto), on-demand otherwise; every figure names its source."""

from datetime import datetime, timedelta, timezone
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from bench.artifacts import Node
from bench.cost import PoolPrice, Prices, collect_spot_prices, spot_price
from catalog import CATALOG

P5EN = "p5en.48xlarge"
START = datetime(2026, 11, 30, 8, tzinfo=timezone.utc)


def node(pool: str, capacity: str) -> Node:
    return Node(f"ip-{pool}", pool, pool, P5EN, capacity, 8)


def test_reserved_nodes_cost_the_contract_price_or_nothing_never_on_demand():
    prices = Prices({"train": PoolPrice(P5EN, "CAPACITY_BLOCK", 31.5), "rollout": PoolPrice(P5EN, "ODCR", None)},
                    "stack s")
    price, source = prices.node(node("train", "CAPACITY_BLOCK"))
    assert price == 31.5 and "contract price of CAPACITY_BLOCK pool train" in source
    # an ODCR node carries capacityType ON_DEMAND; its pool says it is reserved
    price, source = prices.node(node("rollout", "ON_DEMAND"))
    assert price is None and "ODCR p5en.48xlarge: no contract price" in source
    # with no stack, a Capacity Block node has no price (the catalog's on-demand price is not its price)
    assert Prices({}, "the catalog").node(node("train", "CAPACITY_BLOCK"))[0] is None
    assert Prices({}, "the catalog").node(node("x", "ON_DEMAND")) == (CATALOG[P5EN].on_demand_hourly_usd,
                                                                      f"catalog on-demand {P5EN}, us-east-1")


def test_a_price_carries_its_region_and_prices_no_node_of_another():
    """The catalog's on-demand prices are us-east-1's and a contract price holds in the stack's region: a
    node in us-west-2 was priced at them anyway."""
    catalog = Prices({}, "the catalog")
    assert catalog.node(node("x", "ON_DEMAND"), "us-east-1b")[0] == CATALOG[P5EN].on_demand_hourly_usd
    price, source = catalog.node(node("x", "ON_DEMAND"), "us-west-2a")
    assert price is None and "a us-east-1 price, the node is in us-west-2" in source
    stack = Prices({"train": PoolPrice(P5EN, "CAPACITY_BLOCK", 31.5)}, "stack s", region="us-west-2")
    assert stack.node(node("train", "CAPACITY_BLOCK"), "us-west-2a") == (
        31.5, "contract price of CAPACITY_BLOCK pool train (stack s, us-west-2, capacity.hourlyPrice)")
    assert stack.node(node("train", "CAPACITY_BLOCK"), "eu-west-1a")[0] is None


@mock_aws
def test_spot_nodes_cost_the_spot_price_history():
    ec2 = boto3.client("ec2", region_name="us-east-1")
    end = START + timedelta(hours=2)
    got = spot_price(ec2, P5EN, "us-east-1a", START, end)
    history = ec2.describe_spot_price_history(InstanceTypes=[P5EN], Filters=[
        {"Name": "availability-zone", "Values": ["us-east-1a"]}])["SpotPriceHistory"]
    assert got["usd"] == pytest.approx(float(history[0]["SpotPrice"]))
    assert "EC2 DescribeSpotPriceHistory" in got["source"] and "us-east-1a" in got["source"]
    spot = collect_spot_prices(ec2, {f"{P5EN} us-east-1a": (START, end)})
    prices = Prices({}, "the catalog", spot)
    assert prices.node(node("rollout", "SPOT"), "us-east-1a") == (got["usd"], got["source"])
    price, source = Prices({}, "the catalog").node(node("rollout", "SPOT"), "us-east-1a")
    assert price is None and "no Spot price" in source


def test_a_spot_price_is_weighted_by_how_long_it_held():
    class EC2:
        def describe_spot_price_history(self, **kw):
            rec = lambda h, p: {"AvailabilityZone": "us-east-1a", "InstanceType": P5EN,  # noqa: E731
                                "ProductDescription": "Linux/UNIX", "SpotPrice": str(p),
                                "Timestamp": START + timedelta(hours=h)}
            return {"SpotPriceHistory": [rec(-5, 10.0), rec(1, 20.0)]}
    got = spot_price(EC2(), P5EN, "us-east-1a", START, START + timedelta(hours=4))
    assert got["usd"] == pytest.approx((10.0 * 1 + 20.0 * 3) / 4)


def test_report_prices_spot_nodes_from_the_collected_history(tmp_path):
    """`report --spot-prices` collects each Spot node's price over its attempt into spot-prices.json and
    prices the nodes by it, naming the source."""
    import json

    from bench.report import write_report
    from bench.simulate import ArmTruth, Truth, simulate

    class EC2:
        def describe_spot_price_history(self, **kw):
            zone = kw["Filters"][0]["Values"][0]
            return {"SpotPriceHistory": [{"AvailabilityZone": zone, "InstanceType": kw["InstanceTypes"][0],
                                          "ProductDescription": "Linux/UNIX", "SpotPrice": "12.5",
                                          "Timestamp": START - timedelta(days=1)}]}

    truth = Truth(arms={}, default=ArmTruth(tokens_per_s=50000), capacity_type="SPOT")
    simulate(Path("experiments/example-ab.yaml"), truth, tmp_path / "d")
    report = write_report(tmp_path / "d", spot_client=EC2(), plots=False)
    nccl = report["arms"]["nccl"]
    assert json.loads((tmp_path / "d" / "spot-prices.json").read_text())[f"{P5EN} us-east-1a"]["usd"] == 12.5
    assert nccl["price_basis"][0].startswith(f"Spot {P5EN} us-east-1a, EC2 DescribeSpotPriceHistory")
    row = nccl["per_repeat"][0]
    assert row["cost_usd"] == pytest.approx(12.5 * 4 * row["jct_s"] / 3600, rel=1e-3)
