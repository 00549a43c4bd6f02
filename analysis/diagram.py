"""Architecture diagram of a stack, drawn as SVG from its plan and recorded graph.

No Graphviz or other renderer: plain SVG text, laid out as the platform is built (region, VPC,
the one EFA zone and the second zone, subnets, pools, EFA fabric, control plane, checkpoint
bucket, workloads on their pools). Every box stands for something the program registered:
subnets and zones from the recorded subnets, pools from the node groups that list them, EFA
devices from the launch templates, placement groups, the EFA security group, the add-ons and
Helm releases, the bucket and its settings, and the pod templates from the schedulability check.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

from .mocks import Graph
from .recorded import (ADDON, BUCKET, HELM_RELEASE, NAT_GATEWAY, SECURITY_GROUP, pool_resources,
                       resource_id, short_name, subnets_by_id, vpc_blocks)

LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
LUSTRE_LINK = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"

FONT = 11
CHAR = 6.8
LINE = 15
PAD = 8
GAP = 12

COLORS = {"gpu": "#2e7d32", "cpu": "#546e7a", "efa": "#ef6c00", "bad": "#c62828", "text": "#212121",
          "region": "#fafafa", "vpc": "#e3f2fd", "zone": "#ffffff", "nodes": "#fff3e0",
          "private": "#f1f8e9", "public": "#f5f5f5", "aws": "#ede7f6", "aws_stroke": "#5e35b1"}


@dataclass
class Box:
    lines: list[str]
    stroke: str = COLORS["cpu"]
    fill: str = "#ffffff"
    x: float = 0
    y: float = 0
    bold_first: bool = True
    dashed: bool = False
    min_width: float = 0
    marks: dict[int, str] = field(default_factory=dict)
    """Line index -> colour, for lines that must stand out (a pod that does not fit)."""

    @property
    def width(self) -> float:
        return max(self.min_width, max(len(line) for line in self.lines) * CHAR + 2 * PAD)

    @property
    def height(self) -> float:
        return len(self.lines) * LINE + 2 * PAD - 3


def _rect(x, y, w, h, stroke, fill, dashed=False, width=1.2, rx=6) -> str:
    dash = ' stroke-dasharray="6 4"' if dashed else ""
    return (f'<rect x="{x:.0f}" y="{y:.0f}" width="{w:.0f}" height="{h:.0f}" rx="{rx}" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="{width}"{dash}/>')


def _text(x, y, s, bold=False, color=COLORS["text"], size=FONT, anchor="start") -> str:
    weight = ' font-weight="bold"' if bold else ""
    return (f'<text x="{x:.0f}" y="{y:.0f}" font-size="{size}" fill="{color}"{weight} '
            f'text-anchor="{anchor}">{escape(s)}</text>')


def _draw(box: Box) -> list[str]:
    out = [_rect(box.x, box.y, box.width, box.height, box.stroke, box.fill, box.dashed, 1.6)]
    for i, line in enumerate(box.lines):
        out.append(_text(box.x + PAD, box.y + PAD + 10 + i * LINE, line, bold=box.bold_first and i == 0,
                         color=box.marks.get(i, COLORS["text"])))
    return out


def _pool_box(fig, res, placements) -> Box:
    gpu = fig.gpus_per_node > 0
    model = res.pool.instance.gpu_model
    role = "" if fig.role == fig.name else f" ({fig.role})"
    lines = [f"{fig.name}{role}: {fig.nodes_desired} x {fig.instance_type}",
             f"nodes {fig.nodes_min}/{fig.nodes_desired}/{fig.nodes_max} - {fig.capacity}"]
    if res.reservation_target:
        lines.append(f"reservation {res.reservation_target}")
    if res.placement_group is not None:
        lines.append(f"placement group {res.placement_group.inputs.get('strategy', '?')}")
    if gpu:
        lines.append(f"{fig.gpus_desired} x {model} GPU")
    if fig.efa_max:
        lines.append(f"EFA {fig.efa_attached}/{fig.efa_max} per node, {fig.efa_gbps_per_node:,.0f} Gbps")
    lines.append(f"${fig.usd_per_hour:,.2f}/h")
    marks = {}
    for p in placements:
        if p.pool == fig.name:
            marks[len(lines)] = COLORS["text"] if p.fits else COLORS["bad"]
            lines.append(f"pod {p.pod}: " + ("fits" if p.fits else "DOES NOT FIT"))
    return Box(lines, stroke=COLORS["gpu"] if gpu else COLORS["cpu"], marks=marks)


def _row(boxes: list[Box], x: float, y: float) -> float:
    """Place boxes left to right from (x, y); return the row's height."""
    for b in boxes:
        b.x, b.y = x, y
        x += b.width + GAP
    return max((b.height for b in boxes), default=0)


def _row_width(boxes: list[Box]) -> float:
    return sum(b.width for b in boxes) + GAP * max(0, len(boxes) - 1)


def architecture_svg(plan, graph: Graph) -> str:
    """The SVG document for ``plan`` (``analysis.planning.Plan``) and its recorded ``graph``."""
    cfg = plan.config
    figures = {f.name: f for f in plan.pools}
    placements = plan.placements or []
    resources = [r for r in pool_resources(cfg, graph) if r.pool.name in figures]
    subnets = subnets_by_id(graph)
    zone_a, zone_b = plan.zone, next((s.inputs.get("availabilityZone") for s in subnets.values()
                                      if s.inputs.get("availabilityZone") != plan.zone), "")

    def subnet_label(sid: str) -> str:
        s = subnets[sid]
        return f"{short_name(cfg, s.name)} {s.inputs.get('cidrBlock')} ({s.inputs.get('availabilityZone', '?')})"

    single = [r for r in resources if len(r.subnet_ids) == 1]
    spread = [r for r in resources if len(r.subnet_ids) != 1]
    single_boxes = [_pool_box(figures[r.pool.name], r, placements) for r in single]
    spread_boxes = [_pool_box(figures[r.pool.name], r, placements) for r in spread]
    budgets = {b.name: b for b in plan.ip_budget}

    def budget(name: str) -> str:
        b = budgets.get(name)
        return f"{b.demand:,} of {b.capacity:,} IPs at max" if b else ""

    # Top to bottom: control plane, the EFA zone's node subnet, the private subnets of both
    # zones, the public subnets; the checkpoint bucket right of the VPC.
    margin, header = 20, 56
    y = header + 40
    region_top = header + 8
    inner_x = margin + 32
    out: list[str] = []

    # Control plane and its add-ons, above the VPC.
    addons = sorted(a.inputs.get("addonName", a.name) for a in graph.of_type(ADDON))
    charts = sorted(h.inputs.get("chart", h.name) for h in graph.of_type(HELM_RELEASE))
    objects = Counter(r.type.rsplit(":", 1)[1] for r in graph.resources
                      if r.custom and r.type.startswith("kubernetes:") and r.type != HELM_RELEASE)
    eks_lines = [f"EKS control plane {plan.cluster} (Kubernetes {plan.kubernetes})",
                 "ENIs in private subnets of both zones; API auth, KMS secrets, logs",
                 "add-ons: " + ", ".join(addons), "Helm: " + ", ".join(charts)]
    if objects:
        eks_lines.append("workload objects: " + ", ".join(f"{n} {kind}" for kind, n in sorted(objects.items())))
    eks = Box(eks_lines, stroke=COLORS["aws_stroke"], fill=COLORS["aws"])
    eks.x, eks.y = inner_x, y
    vpc_top = eks.y + eks.height + 30

    # Node subnet row (EFA zone only).
    node_subnet_ids = sorted({r.subnet_ids[0] for r in single})
    row_y = vpc_top + 40
    content: list[str] = []
    storage_boxes = []
    for fs in graph.of_type(LUSTRE):
        ids = fs.inputs.get("subnetIds")
        if set([ids] if isinstance(ids, str) else ids or []) & set(node_subnet_ids):
            exports = [a.inputs.get("dataRepositoryPath", "") for a in graph.of_type(LUSTRE_LINK)
                       if a.inputs.get("fileSystemId") == resource_id(fs)]
            storage_boxes.append(Box(
                [f"FSx for Lustre {short_name(cfg, fs.name)}",
                 f"{int(fs.inputs.get('storageCapacity', 0)):,} GiB {fs.inputs.get('deploymentType', '')}".rstrip()]
                + [f"syncs {e}" for e in exports], stroke=COLORS["aws_stroke"], fill=COLORS["aws"]))
    row = single_boxes + storage_boxes
    node_w = _row_width(row) + 2 * PAD
    efa_pools = [r for r in single if r.pool.efa_enabled]
    efa_sg = [g for g in sorted(graph.of_type(SECURITY_GROUP), key=lambda g: g.name)
              if any(resource_id(g) in i.get("securityGroups", []) for r in efa_pools for i in r.interfaces)]
    fabric = ""
    if efa_pools:
        nodes = sum(figures[r.pool.name].nodes_desired for r in efa_pools)
        gbps = sum(figures[r.pool.name].efa_gbps_total for r in efa_pools)
        fabric = (f"EFA fabric: {nodes} nodes, {gbps:,.0f} Gbps in total; security group "
                  f"{', '.join(short_name(cfg, g.name) for g in efa_sg) or 'none'} admits all traffic to/from itself")
        node_w = max(node_w, len(fabric) * CHAR + 2 * PAD)
    node_h = 0.0
    if row:
        title = " + ".join(subnet_label(s) for s in node_subnet_ids)
        names = [short_name(cfg, subnets[s].name) for s in node_subnet_ids]
        title_line = f"subnet {title} - {budget(names[0])}" if names else "subnet"
        node_w = max(node_w, len(title_line) * CHAR + 2 * PAD)
        h = _row(row, inner_x + 16 + PAD, row_y + 26)
        node_h = 26 + h + (34 if fabric else 8)
        content.append(_rect(inner_x + 16, row_y, node_w, node_h, COLORS["efa"], COLORS["nodes"]))
        content.append(_text(inner_x + 16 + PAD, row_y + 17, title_line, bold=True))
        for b in row:
            content += _draw(b)
        if fabric:
            fy = row_y + 26 + h + 14
            content.append(f'<line x1="{inner_x + 16 + PAD:.0f}" y1="{fy:.0f}" '
                           f'x2="{inner_x + 16 + node_w - PAD:.0f}" y2="{fy:.0f}" stroke="{COLORS["efa"]}" '
                           f'stroke-width="5" stroke-linecap="round"/>')
            for b in single_boxes:
                content.append(f'<line x1="{b.x + b.width / 2:.0f}" y1="{b.y + b.height:.0f}" '
                               f'x2="{b.x + b.width / 2:.0f}" y2="{fy:.0f}" stroke="{COLORS["efa"]}" '
                               f'stroke-width="3"/>')
            content.append(_text(inner_x + 16 + PAD, fy + 15, fabric, color=COLORS["efa"], bold=True))
            node_h += 14

    # Private subnets in both zones, spread pools across them.
    priv_y = row_y + node_h + (GAP * 2 if node_h else 0)
    spread_ids = sorted({s for r in spread for s in r.subnet_ids})
    spread_w = _row_width(spread_boxes) + 2 * PAD
    priv_title = ("pools spread over " + " + ".join(subnet_label(s) for s in spread_ids)) if spread_ids else ""
    spread_w = max(spread_w, len(priv_title) * CHAR + 2 * PAD)
    priv_h = 0.0
    if spread_boxes:
        h = _row(spread_boxes, inner_x + 16 + PAD, priv_y + 26)
        priv_h = 26 + h + 8
        content.append(_rect(inner_x + 16, priv_y, spread_w, priv_h, COLORS["gpu"], COLORS["private"]))
        content.append(_text(inner_x + 16 + PAD, priv_y + 17, priv_title, bold=True))
        for b in spread_boxes:
            content += _draw(b)

    # Public subnets: NAT gateway.
    pub_y = priv_y + priv_h + GAP * 2
    nat_subnets = {n.inputs.get("subnetId") for n in graph.of_type(NAT_GATEWAY)}
    publics = [s for sid, s in subnets.items() if sid not in node_subnet_ids and sid not in spread_ids]
    pub_boxes = [Box([f"subnet {short_name(cfg, s.name)} {s.inputs['cidrBlock']}",
                      s.inputs.get("availabilityZone", "") + (" - NAT gateway" if resource_id(s) in nat_subnets else "")],
                     stroke=COLORS["cpu"], fill=COLORS["public"], dashed=True) for s in publics]
    pub_h = _row(pub_boxes, inner_x + 16, pub_y)
    for b in pub_boxes:
        content += _draw(b)

    inner_w = max(node_w, spread_w, _row_width(pub_boxes), eks.width) + 32
    vpc_h = pub_y + pub_h + GAP + 8 - vpc_top
    blocks = vpc_blocks(graph)
    vpc_title = f"VPC {blocks[0] if blocks else ''}" + (f" + EFA CIDR {', '.join(blocks[1:])}" if len(blocks) > 1 else "")
    zones = f"zones: {zone_a} holds every EFA and reserved node; {zone_b} only for the control plane and spread pools"

    # The checkpoint bucket, right of the VPC.
    buckets = graph.of_type(BUCKET)
    bx = inner_x + inner_w + 40
    bucket_boxes = []
    for b in buckets:
        versioned = any(v.inputs.get("versioningConfiguration", {}).get("status") == "Enabled"
                        for v in graph.of_type("aws:s3/bucketVersioning:BucketVersioning"))
        bucket_boxes.append(Box([f"S3 {short_name(cfg, b.name)}",
                                 "versioned" if versioned else "NOT versioned",
                                 "kept on destroy" if b.retain_on_delete else "deleted on destroy",
                                 "reached via S3 gateway endpoint"],
                                stroke=COLORS["aws_stroke"], fill=COLORS["aws"]))
    _row(bucket_boxes, bx, vpc_top + 40)

    width = bx + max((b.width for b in bucket_boxes), default=0) + margin + 16
    height = vpc_top + vpc_h + 40
    out.append(_rect(margin, region_top, width - 2 * margin, height - region_top - margin,
                     "#9e9e9e", COLORS["region"], dashed=True))
    out.append(_text(margin + PAD, region_top + 18, f"region {plan.region}", bold=True))
    out += _draw(eks)
    out.append(_rect(inner_x, vpc_top, inner_w, vpc_h, "#1565c0", COLORS["vpc"]))
    out.append(_text(inner_x + PAD, vpc_top + 17, vpc_title, bold=True))
    out.append(_text(inner_x + PAD, vpc_top + 32, zones))
    out += content
    for b in bucket_boxes:
        out += _draw(b)
        out.append(f'<line x1="{inner_x + inner_w:.0f}" y1="{b.y + b.height / 2:.0f}" x2="{b.x:.0f}" '
                   f'y2="{b.y + b.height / 2:.0f}" stroke="{COLORS["aws_stroke"]}" stroke-width="2" stroke-dasharray="4 3"/>')
    t = plan.totals
    title = (f"{plan.stack}: {t.gpus_desired} GPUs on {t.gpu_nodes_desired} GPU nodes, "
             f"{t.efa_gbps_total:,.0f} Gbps EFA, ${t.usd_per_hour:,.2f}/h at desired size")
    status = ("no violations" if plan.ok else f"{len(plan.violations)} violation(s): "
              + "; ".join(str(v) for v in plan.violations[:3]))
    width = max(width, len(title) * 8 + 2 * margin)
    head = [_text(margin, 24, title, bold=True, size=15),
            _text(margin, 42, f"offline plan from the recorded Pulumi graph - {status}",
                  color=COLORS["text"] if plan.ok else COLORS["bad"])]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="DejaVu Sans Mono, Menlo, Consolas, monospace">\n'
            f'<rect width="100%" height="100%" fill="#ffffff"/>\n' + "\n".join(head + out) + "\n</svg>\n")
