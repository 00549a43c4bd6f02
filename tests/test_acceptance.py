"""Fabric acceptance: fabric_bench's arithmetic and command line (without torch), the parsers on the
sample outputs of tests/data/fabric (README.md there says which are real and which synthetic), the
comparison naming planted slow nodes and links, the plot, and the per-pool Volcano Job against the
Volcano CRD and the Kubernetes schema, sized and placed like the pool's Ray worker."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import yaml
from conftest import ROOT, load
from test_workloads import FP8_V2, container, merge, k8s_version, validate_custom, validate_pod_template, variant

from svgread import axis_labels, by_id, one, points, right_of, texts, ticks, y_scale
from workloads import acceptance as A
from workloads.acceptance import plot as P
from workloads.render import acceptance as J
from workloads.cli import acceptance as CLI
from workloads.pod import fabric_bench as FB
from workloads.derive.model import derive
from workloads.render import ray_pod_template, scripts_configmap
from workloads.render.common import RAY_PODS, VOLCANO_QUEUE

DATA = ROOT / "tests" / "data" / "fabric"
GIB = 1024 ** 3


@functools.cache
def model(stack: str):
    return derive(load(stack))


@functools.cache
def v2_model():
    return derive(variant("p5en-prod", FP8_V2))


def text(name: str) -> str:
    return (DATA / name).read_text()


# --- fabric_bench: arithmetic, schedule, command line ---------------------------------------------

def test_busbw_follows_nccl_tests_definitions():
    assert FB.bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert FB.bus_factor("all_to_all", 8) == pytest.approx(0.875)
    assert FB.bus_factor("all_reduce", 1) == FB.bus_factor("all_to_all", 1) == 0
    # A public 2x p5.48xlarge all_reduce_perf row (16 ranks; awsome-distributed-training nccl-tests
    # README): 2147483648 B in 9074.5 us = 236.65 GB/s algbw, 443.72 GB/s busbw.
    algbw, busbw = FB.bandwidth("all_reduce", 2147483648, 9074.5e-6, 16)
    assert (round(algbw, 2), round(busbw, 2)) == (236.65, 443.72)
    algbw, busbw = FB.bandwidth("all_to_all", 1024 ** 3, 0.01, 16)
    assert busbw == pytest.approx(algbw * 15 / 16) and algbw == pytest.approx(107.374, abs=1e-3)
    p = FB.point("all_reduce", 2 * GIB, 0.01, 16, wrong=3)
    assert p == {"bytes": 2 * GIB, "time_us": 10000.0, "algbw": 214.748, "busbw": 402.653, "wrong": 3}
    with pytest.raises(ValueError):
        FB.bus_factor("broadcast", 8)


def test_sizes_and_buffer_fitting():
    assert FB.parse_size("1M") == 2 ** 20 and FB.parse_size("4G") == 4 * GIB and FB.parse_size("8") == 8
    assert FB.parse_size("512KiB") == 512 * 1024
    for bad in ("", "0", "-1M", "1X", "M"):
        with pytest.raises(ValueError):
            FB.parse_size(bad)
    steps = FB.sizes(2 ** 20, 4 * GIB)
    assert steps[0] == 2 ** 20 and steps[-1] == 4 * GIB and len(steps) == 13
    assert FB.fit("all_to_all", 2 ** 20, 6, 2) % 12 == 0 and FB.fit("all_reduce", 2 ** 20, 6, 4) == 2 ** 20


@pytest.mark.parametrize("n", range(2, 12))
def test_round_robin_covers_every_pair_once_and_each_node_once_per_round(n):
    rounds = FB.round_robin(n)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == [(a, b) for a in range(n) for b in range(a + 1, n)]
    for r in rounds:
        nodes = [x for p in r for x in p]
        assert len(nodes) == len(set(nodes))
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)


def test_fabric_bench_imports_and_parses_its_command_line_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import workloads.pod.fabric_bench as F\n"
            "a = F.parse_args(['--out', 'x.json', '--scope', 'world,pairs', '--max-bytes', '1G',\n"
            "                  '--dtype', 'bfloat16'])\n"
            "print(a.scopes, a.op_list, a.max_bytes, a.pair_bytes, a.dtype, a.backend)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['world',", "'pairs']", "['all_reduce',", "'all_to_all']", str(GIB),
                                  str(2 * GIB), "bfloat16", "nccl"]
    # As the pods run it: a lone file under /opt/scripts, no package around it.
    out = subprocess.run([sys.executable, str(ROOT / "workloads" / "pod" / "fabric_bench.py"), "--help"],
                         capture_output=True, text=True, cwd="/")
    assert out.returncode == 0 and "--scope" in out.stdout and "--ranks-per-node" in out.stdout
    for bad in (["--scope", "rack"], ["--ops", "broadcast"], ["--max-bytes", "1K", "--min-bytes", "1M"],
                ["--iters", "0"]):
        with pytest.raises(SystemExit):
            FB.parse_args(bad)
    defaults = FB.parse_args([])
    assert (defaults.scopes, defaults.min_bytes, defaults.max_bytes) == (["node", "world", "pairs"], 2 ** 20, 4 * GIB)


# --- parsers -------------------------------------------------------------------------------------------

def test_nccl_tests_parser_on_all_reduce_with_srun_prefix():
    p = A.parse_nccl_tests(text("nccl_all_reduce_perf_2node_synthetic.txt"))
    assert p["collective"] == "all_reduce_perf" and p["nccl_version"] == "2.31.2+cuda13.0"
    assert len(p["ranks"]) == 16 and {r["host"] for r in p["ranks"].values()} == {
        "ip-10-1-0-10.ec2.internal", "ip-10-1-0-11.ec2.internal"}
    assert p["rows"][0]["bytes"] == 8 and p["rows"][-1]["bytes"] == 4 * GIB and len(p["rows"]) == 30
    last = p["rows"][-1]
    assert last["type"] == "float" and last["redop"] == "sum" and last["root"] == -1
    assert last["in_place"]["busbw"] == pytest.approx(438.32) and last["out_of_place"]["wrong"] == 0
    assert p["out_of_bounds"] == 0 and p["avg_busbw"] == pytest.approx(125.169)
    for r in p["rows"]:  # the columns are consistent with nccl-tests' definitions (rounding to 0.01)
        _, busbw = FB.bandwidth("all_reduce", r["bytes"], r["in_place"]["time_us"] / 1e6, 16)
        assert r["in_place"]["busbw"] == pytest.approx(busbw, abs=0.02 + busbw * 2e-3)


def test_nccl_tests_parser_on_alltoall_with_mpirun_prefix_and_log_noise():
    p = A.parse_nccl_tests(text("nccl_alltoall_perf_2node_synthetic.txt"))
    assert p["collective"] == "alltoall_perf" and {r["redop"] for r in p["rows"]} == {"none"}
    doc = A.from_nccl_tests(p, "all_to_all")
    assert doc["world"] == {"ranks": 16, "nodes": 2, "ranks_per_node": 8}
    assert doc["results"][0]["sizes"][-1]["busbw"] == pytest.approx(89.78)


def test_nccl_tests_parser_on_the_old_table_without_root_and_on_bad_rows():
    # nccl-tests before the root column (2019-era layout: error column holds a max error, not a count).
    old = ("# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20\n"
           "#                                           out-of-place                    in-place\n"
           "#    size    count  type redop    time  algbw  busbw  error    time  algbw  busbw  error\n"
           "  1048576   262144 float   sum   100.0  10.49  19.66  2e-07   101.0  10.38  19.47  2e-07\n")
    p = A.parse_nccl_tests(old)
    assert p["rows"][0]["root"] is None and p["rows"][0]["out_of_place"]["wrong"] == pytest.approx(2e-7)
    assert A.from_nccl_tests(p, "all_reduce", nodes=2)["results"][0]["sizes"][0]["wrong"] == 0
    with pytest.raises(ValueError, match="columns"):
        A.parse_nccl_tests(text("nccl_all_reduce_perf_2node_synthetic.txt") + "0:   8  2  float  sum  -1  70.0\n")
    with pytest.raises(ValueError, match="no nccl-tests rows"):
        A.parse_nccl_tests("# nothing here\n")


def test_deepep_parser_on_test_ep_lines():
    recs = A.parse_deepep(text("deepep_test_ep_2node_synthetic.log"))
    assert len(recs) == 2 * 8 * 5 + 16 * 5
    intra = [r for r in recs if r["phase"] == "intranode"]
    assert {r["ranks"] for r in intra} == {8} and {r["so_gbs"] for r in intra} == {0}
    first = recs[0]
    assert first == {"phase": "intranode", "node": "ip-10-1-0-10.ec2.internal", "rank": 0, "ranks": 8,
                     "kernel": "dispatch", "so_gbs": 0, "su_gbs": 600, "time_us": 150.0, "bytes": 96000000,
                     "epilogue": "copy", "epilogue_gbs": 900, "epilogue_us": 40.5}
    assert {r["kernel"] for r in recs} == {"dispatch", "expanded dispatch", "cached dispatch", "combine",
                                           "reduced combine"}
    # kubectl logs --prefix instead of the Job's tag; untagged lines keep no phase.
    line = ("   @ EP:   3/16 | combine: 44 GB/s (SO), 310 GB/s (SU), 901.500 us, 270000000 bytes | "
            "reduce: 800 GB/s, 60.250 us")
    (r,) = A.parse_deepep(f"[pod/fabric-rollout-node-1/fabric] {line}\n")
    assert (r["node"], r["phase"], r["kernel"], r["so_gbs"]) == ("fabric-rollout-node-1", None, "combine", 44)
    with pytest.raises(ValueError, match="dd758caf format"):
        A.parse_deepep(line.replace(" (SU)", ""))
    with pytest.raises(ValueError, match="marker"):
        A.parse_deepep(line.replace("@ EP", "* EP"))
    assert A.parse_deepep("Config:\n > Ranks: 2 x 8\n") == []


def test_fabric_bench_documents_real_and_synthetic_load():
    smoke = A.load_fabric_bench(text("fabric_bench_h200_1gpu_smoke.json"))
    assert smoke["machine"]["gpu"] == "NVIDIA H200" and smoke["world"]["ranks"] == 1
    assert {(r["scope"], r["op"]) for r in smoke["results"]} == {("world", "all_reduce"), ("world", "all_to_all")}
    gloo = A.load_fabric_bench(text("fabric_bench_gloo_cpu_3x2_emulated.log"))  # from the FABRIC_BENCH_JSON line
    assert gloo["world"]["nodes"] == 3 and [p["nodes"] for p in gloo["pairs"]] == [[0, 1], [0, 2], [1, 2]]
    assert [(r["scope"], r.get("node")) for r in gloo["results"]][:3] == [("node", 0), ("node", 0), ("node", 1)]
    assert all(s["wrong"] == 0 for r in gloo["results"] for s in r["sizes"])
    synthetic = A.load_fabric_bench(json.loads(text("fabric_bench_p5en_4node_synthetic.json")))
    assert synthetic["synthetic"] is True
    with pytest.raises(ValueError, match="fabric-bench/1"):
        A.load_fabric_bench({"format": "other"})


# --- expected figures and the comparison ----------------------------------------------------------

def test_every_family_has_cited_or_derived_figures_and_every_stack_pool_has_a_family():
    for fam in A.EXPECTED.values():
        for fig in (fam.intra_all_reduce, fam.pair_all_reduce, fam.world_all_reduce):
            assert fig.busbw > 0 and fig.source.startswith("https://")
            assert fig.derived == (fig.derivation is not None)
        assert fam.efa_gbps > 0 and fam.gpus == 8
    measured = {n: [f.derived for f in (x.intra_all_reduce, x.pair_all_reduce, x.world_all_reduce)]
                for n, x in A.EXPECTED.items()}
    assert measured["p4de"] == [False, False, False] and measured["p5"] == [False, False, True]
    assert measured["p6-b300"] == [True, True, True]
    assert A.EXPECTED["p4d"].intra_all_reduce.busbw == 235.0 and A.EXPECTED["p5"].pair_all_reduce.busbw == 443.72
    assert A.expected(A.EXPECTED["p5"], "world", "all_to_all", 8).derived
    for stack in ("p4d", "p4de", "p5", "p5e", "p5en-prod", "p6-b200", "p6-b300"):
        for pool in model(stack).gpu_pools:
            assert A.family_of(pool).instance_type == pool.instance_type


def test_compare_names_the_planted_slow_node_link_and_deepep_rank():
    r = A.compare(text("fabric_bench_p5en_4node_synthetic.json"), "p5en",
                  deepep=text("deepep_test_ep_2node_synthetic.log"))
    assert r["ok"] is False and r["synthetic"] is True
    assert [(s["node"], s["host"]) for s in r["slow_nodes"]] == [(2, "ip-10-1-0-12.ec2.internal")]
    assert [(p["nodes"], p["cause"]) for p in r["slow_pairs"]] == [([0, 3], "link")]
    assert r["failed"] == ["node 2 all_reduce"]
    assert {(s["phase"], s["rank"], s["node"]) for s in r["deepep"]["slow"]} == {
        ("internode", 11, "ip-10-1-0-11.ec2.internal")}
    node2 = next(c for c in r["checks"] if c.get("node") == 2 and c["op"] == "all_reduce")
    assert node2["floor"] == pytest.approx(0.8 * 474.13, abs=0.01) and not node2["derived"]
    # Without the planted faults the same pool passes.
    doc = json.loads(text("fabric_bench_p5en_4node_synthetic.json"))
    for s in doc["results"]:
        if s["scope"] == "node" and s["node"] == 2 and s["op"] == "all_reduce":
            s["sizes"] = next(x for x in doc["results"] if x["scope"] == "node" and x["node"] == 0
                              and x["op"] == "all_reduce")["sizes"]
    for p in doc["pairs"]:
        if p["nodes"] == [0, 3]:
            p["busbw"] = 441.0
    assert A.compare(doc, "p5en")["ok"] is True


def _pairs_doc(slow: int | None, n: int = 4, wrong_pair: tuple[int, int] | None = None) -> dict:
    pairs = []
    for a in range(n):
        for b in range(a + 1, n):
            busbw = 200.0 if slow in (a, b) else 440.0
            t = 2 * GIB / (busbw / FB.bus_factor("all_reduce", 16) * FB.GB)
            pairs.append({"nodes": [a, b], "hosts": [f"h{a}", f"h{b}"], "op": "all_reduce", "ranks": 16,
                          **FB.point("all_reduce", 2 * GIB, t, 16, wrong=int((a, b) == wrong_pair))})
    t = GIB / (330 / FB.bus_factor("all_reduce", 8 * n) * FB.GB)
    world = [{"scope": "world", "op": "all_reduce", "ranks": 8 * n, "nodes": list(range(n)),
              "sizes": [FB.point("all_reduce", GIB, t, 8 * n)]}]
    return FB.document({"nccl": "2.31.2"}, {"ranks": 8 * n, "nodes": n, "ranks_per_node": 8}, {}, world, pairs,
                       synthetic=True)


def test_a_node_slow_in_all_its_pairs_is_named_not_its_links():
    r = A.compare(_pairs_doc(slow=1), "p5")
    assert [s["node"] for s in r["slow_nodes"]] == [1] and "3 of its 3 pairs fail" in r["slow_nodes"][0]["why"][0]
    assert {tuple(p["nodes"]) for p in r["slow_pairs"]} == {(0, 1), (1, 2), (1, 3)}
    assert {p["cause"] for p in r["slow_pairs"]} == {"node 1"}
    # p5's 2-node figure is a measurement: the slow pairs fail against it too.
    assert any("floor 354.98" in w for p in r["slow_pairs"] for w in p["why"])
    assert A.compare(_pairs_doc(slow=None), "p5")["ok"] is True
    wrong = A.compare(_pairs_doc(slow=None, wrong_pair=(0, 2)), "p5")
    assert not wrong["ok"] and wrong["slow_pairs"][0]["why"] == ["1 wrong elements"]


def test_derived_figures_only_warn_and_nccl_tests_runs_compare_too():
    doc = A.from_nccl_tests(A.parse_nccl_tests(text("nccl_alltoall_perf_2node_synthetic.txt")), "all_to_all")
    doc["results"][0]["sizes"] = [dict(s, busbw=s["busbw"] / 3) for s in doc["results"][0]["sizes"]]
    r = A.compare(doc, "p5en")
    (c,) = r["checks"]
    assert c["derived"] and not c["ok"] and c["advisory"] and r["ok"] and r["warnings"]
    ar = A.compare(A.from_nccl_tests(A.parse_nccl_tests(text("nccl_all_reduce_perf_2node_synthetic.txt")),
                                     "all_reduce"), "p5")
    assert ar["ok"] and ar["checks"][0]["expected"] == 443.72  # 2 nodes: the 2-node figure


def test_plot_draws_each_series_bar_and_floor_with_ticks_legends_outside_and_the_slow_names():
    r = A.compare(text("fabric_bench_p5en_4node_synthetic.json"), "p5en",
                  deepep=text("deepep_test_ep_2node_synthetic.log"))
    drawn = A.plot_svg(r)
    assert A.plot_svg(r) == drawn  # the same report, the same bytes
    root = ET.fromstring(drawn)
    words = " ".join(texts(root))
    assert "FAIL" in words and "SYNTHETIC DATA" in words and "slow node 2" in words and "slow pair 0-3 (link)" in words
    lines = one(root, f"{P.PANEL}:lines")
    # 2 world series, the median node per op, and failing node 2 (the passing nodes are in the median)
    series = ["world (32 ranks) all_reduce", "world (32 ranks) all_to_all", "median node all_reduce (4 nodes)",
              "node 2 all_reduce", "median node all_to_all (4 nodes)"]
    assert [g.removeprefix(f"{P.CURVE}:") for g in by_id(lines, f"{P.CURVE}:")] == series
    curve = {c["label"]: c for c in r["curves"]} | {f"median node {op} (4 nodes)": dict(
        next(c for c in r["curves"] if c["label"] == f"node 0 {op}"), ok=True) for op in ("all_reduce", "all_to_all")}
    legend = one(lines, "legend:series")  # each series, then its floor and whether it failed
    assert right_of(legend, lines) and texts(legend) == [
        line for s in series for line in (s, f"floor {curve[s]['floor']:g} GB/s" + ("" if curve[s]["ok"] else ": FAIL"))]
    assert texts(legend)[7] == "floor 379.3 GB/s: FAIL"
    assert {g for g in by_id(lines, f"{P.FLOOR}:")} == {f"{P.FLOOR}:{c['floor']:g}" for c in r["curves"]}
    assert axis_labels(lines) == ["message size (bytes, log scale)", "bus bandwidth (GB/s)"]
    assert {t for _, t in ticks(lines, "x")} >= {"1M", "16M", "256M", "4G"}
    nodes = one(root, f"{P.PANEL}:nodes")
    bars = by_id(nodes, f"{P.BAR}:")
    assert [b.rsplit(":", 1)[1] for b in bars] == ["ok" if n["ok"] else "FAIL" for n in r["nodes"]]
    value = y_scale(nodes)
    assert [value(min(y for _, y in points(b))) for b in bars.values()] == pytest.approx(
        [n["all_reduce"] for n in r["nodes"]], rel=0.005)
    assert right_of(one(nodes, "legend:nodes"), nodes) and "floor 379.3 GB/s" in texts(one(nodes, "legend:nodes"))
    pairs = by_id(one(root, f"{P.PANEL}:pairs"), f"{P.BAR}:")
    assert [b.split(":")[1] for b in pairs] == [f"{p['nodes'][0]}-{p['nodes'][1]}" for p in r["pairs"]]
    smoke = ET.fromstring(A.plot_svg(A.compare(text("fabric_bench_h200_1gpu_smoke.json"), "p5en")))
    assert not by_id(smoke, f"{P.PANEL}:nodes") and by_id(smoke, f"{P.CURVE}:")


# --- the Job -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stack,pool", [("p5en-prod", "train"), ("p5en-prod", "rollout"), ("p4d", "rollout"),
                                        ("p6-b300", "train")])
def test_job_validates_and_its_pods_are_the_pools_ray_workers(stack, pool):
    m = model(stack)
    job = J.acceptance_job(m, pool)
    validate_custom(job, k8s_version(load(stack)))  # the Volcano CRD, and the pod template's schema
    (task,) = job["spec"]["tasks"]
    g = next(w for w in m.workers if w.pool.name == pool)
    n = g.pool.nodes.desired
    assert (job["spec"]["minAvailable"], task["replicas"], task["minAvailable"]) == (n, n, n)
    assert job["spec"]["queue"] == VOLCANO_QUEUE and job["spec"]["schedulerName"] == "volcano"
    assert set(job["spec"]["plugins"]) == {"svc", "env"}
    got, want = task["template"], ray_pod_template(m, g)
    c, w = container(got), container(want)
    assert c["image"] == w["image"] and c["resources"] == w["resources"]
    assert c["securityContext"] == w["securityContext"]
    # The Ray worker's environment plus what Miles gives every Ray worker (its runtime env).
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert {e["name"]: e["value"] for e in w["env"]} == g.env and set(g.env) <= set(env)
    assert {k: v for k, v in env.items() if k != "NODE_NAME"} == {**g.env, **m.runtime_env, "PYTHONUNBUFFERED": "1"}
    assert "NODE_NAME" in env
    for key in ("nodeSelector", "tolerations", "serviceAccountName", "securityContext"):
        assert got["spec"].get(key) == want["spec"].get(key), key
    assert got["spec"]["volumes"] == want["spec"]["volumes"]
    assert got["spec"]["initContainers"][0]["command"] == want["spec"]["initContainers"][0]["command"]
    assert got["spec"]["restartPolicy"] == "Never"
    assert RAY_PODS.items() <= got["metadata"]["labels"].items()  # the Ray NetworkPolicy admits their TCP
    mounts = {v["mountPath"]: v["name"] for v in c["volumeMounts"]}
    assert mounts["/opt/scripts"] == "scripts" and mounts["/dev/shm"] == "dshm" and m.paths.mount in mounts
    script = c["command"][2]
    assert c["command"][:2] == ["bash", "-c"]
    assert subprocess.run(["bash", "-n", "-c", script]).returncode == 0
    assert (f"torchrun --nnodes={n} --nproc-per-node={g.gpus} --rdzv-backend=c10d --rdzv-endpoint=\"$MASTER:29500\""
            in script)
    assert "/opt/scripts/fabric_bench.py --out" in script and "VC_NODE_HOSTS" in script
    assert ("DEEPEP" in script) == J.uses_deepep_v2(m, g.pool)  # p5en-prod runs DeepEP V2 (miles-deepep-v2)


def test_deepep_v2_tests_run_on_the_rollout_pool_only():
    m = v2_model()
    script = J.job_script(m, "rollout")
    assert subprocess.run(["bash", "-n", "-c", script]).returncode == 0
    assert "run_ep intranode 1 0 127.0.0.1 8361" in script
    assert "run_ep internode 2 $(( INDEX % 2 ))" in script  # engines of 2 nodes: DeepEP's hybrid mode
    assert "tests/elastic/test_ep.py --num-processes 8" in script and "cd /opt/deepep" in script
    # The trainer keeps Megatron's NCCL all-to-all (workloads.derive.moe_backend.choose): no V2 tests there.
    assert "DEEPEP" not in J.job_script(m, "train")
    on_01 = derive(variant("p5en-prod", merge(FP8_V2, {"workloads": {"run": {"software": "miles-0.1",
                                                                                "deepep": {"version": "v1"},
                                                                                "rollout": {"nodesPerEngine": 1}}}})))
    assert "DEEPEP" not in J.job_script(on_01, "rollout")  # legacy DeepEP: no V2 tests
    validate_pod_template(J.acceptance_template(m, "rollout"), k8s_version(variant("p5en-prod", FP8_V2)))


def test_commands_and_refusals():
    m = model("p5en-prod")
    assert J.acceptance_command(m, "rollout") == (
        "python -m workloads.cli.acceptance p5en-prod rollout | kubectl apply -f -")
    assert "volcano.sh/job-name=fabric-rollout" in J.report_command(m, "rollout")
    assert "report --stack p5en-prod --pool rollout" in J.report_command(m, "rollout")
    assert J.holds_pool(m, "train") is not None  # the stack's RayCluster holds the pool
    with pytest.raises(ValueError, match="not a GPU pool"):
        J.acceptance_job(m, "cpu")


def test_cli_prints_the_job_and_reports(tmp_path, capsys):
    assert CLI.main(["p4d", "rollout"]) == 0
    out = capsys.readouterr()
    job = yaml.safe_load(out.out)
    assert job["kind"] == "Job" and job["metadata"]["name"] == "fabric-rollout"
    assert "stays Pending" in out.err and "report --stack p4d --pool rollout" in out.err
    assert CLI.main(["p4d", "nope"]) == 2
    svg = tmp_path / "r.svg"
    rc = CLI.main(["report", str(DATA / "fabric_bench_p5en_4node_synthetic.json"),
                 str(DATA / "deepep_test_ep_2node_synthetic.log"), "--family", "p5en", "--svg", str(svg)])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1 and report["slow_nodes"][0]["node"] == 2 and ET.parse(svg).getroot().tag.endswith("svg")


def test_the_scripts_configmap_ships_fabric_bench():
    data = scripts_configmap(model("p4d"))["data"]
    assert data[J.FABRIC_BENCH_KEY] == (ROOT / "workloads" / "pod" / "fabric_bench.py").read_text()


def test_the_measured_h200_run_is_held_to_the_nvls_off_figure():
    """docs/measurements/fabric-h200x2.json ran with NCCL_NVLS_ENABLE=0: the public 474 GB/s needs
    NVLS, so the run is held to the measured NVLS-off figure and passes; the same document with
    NVLS on would be held to 474 GB/s and fail."""
    import copy
    import json as _json
    doc = _json.loads((ROOT / "docs" / "measurements" / "fabric-h200x2.json").read_text())
    report = A.compare(doc, "p5en")
    (ar,) = [c for c in report["checks"] if c["op"] == "all_reduce"]
    assert report["ok"] and ar["expected"] == 345.19 and ar["measured"] >= ar["floor"]
    on = copy.deepcopy(doc)
    on["machine"]["env"]["NCCL_NVLS_ENABLE"] = "1"
    (ar_on,) = [c for c in A.compare(on, "p5en")["checks"] if c["op"] == "all_reduce"]
    assert ar_on["expected"] == 474.13 and not ar_on["ok"]
