"""The teams against the pools and the cluster's admins: quotas the pools can hold, one EKS access
entry per principal."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from stackconfig.stack import Pool

from workloads.schema.teams import TeamSettings


def _gpu_pools(pools: Iterable[Pool]) -> dict[str, Pool]:
    """Pools whose instance type has GPUs, by name."""
    return {p.name: p for p in pools if p.instance.gpus > 0}


def pool_gpus(pool: Pool) -> int:
    """GPUs of a pool at its desired size."""
    return pool.instance.gpus * pool.nodes.desired


def validate_members(teams: Sequence[TeamSettings], admin_arns: Iterable[str]) -> None:
    """A member ARN gets one EKS access entry (EKS allows one per principal): not also a cluster admin's."""
    admins = set(admin_arns)
    for t in teams:
        both = sorted(admins & set(t.members))
        if both:
            raise ValueError(f"workloads.teams[{t.name}].members: {both[0]} is in cluster.adminRoleArns too, and EKS "
                             f"allows one access entry per principal; allowed: a principal that is not a cluster admin")


def validate_teams(teams: Sequence[TeamSettings], pools: Iterable[Pool]) -> None:
    """Raise ValueError("workloads.teams[<name>]...: ...; allowed: ...") for a quota the pools cannot hold."""
    pools = list(pools)
    gpu = _gpu_pools(pools)
    allowed_pools = ", ".join(gpu) or "(no GPU pool)"
    dupes = sorted(n for n, c in Counter(t.name for t in teams).items() if c > 1)
    if dupes:
        raise ValueError(f"workloads.teams[{dupes[0]}].name: duplicate team name; allowed: one entry per team")
    by_name = {p.name: p for p in pools}
    for t in teams:
        for pool_name, q in t.gpus.items():
            where = f"workloads.teams[{t.name}].gpus.{pool_name}"
            if pool_name not in by_name:
                raise ValueError(f"{where}: no such pool; allowed: {allowed_pools}")
            if pool_name not in gpu:
                raise ValueError(f"{where}: pool {pool_name} ({by_name[pool_name].instance_type}) has no GPUs; "
                                 f"allowed: {allowed_pools}")
            total = pool_gpus(gpu[pool_name])
            if q.cap > total:
                raise ValueError(f"{where}.cap: {q.cap} exceeds the pool's {total} GPUs at desired size; "
                                 f"allowed: 1..{total}")
    for name, pool in gpu.items():
        total = pool_gpus(pool)
        for what, plural, of in (("guarantee", "guarantees", lambda q: q.guarantee),
                                 ("deserved", "deserved shares", lambda q: q.deserved)):
            claims = [(t.name, of(t.gpus[name])) for t in teams if name in t.gpus]
            if sum(g for _, g in claims) > total:
                parts = " + ".join(f"{n} {g}" for n, g in claims)
                raise ValueError(f"workloads.teams[{claims[-1][0]}].gpus.{name}.{what}: {plural} over pool {name} "
                                 f"sum to {sum(g for _, g in claims)} ({parts}), more than its {total} GPUs at desired "
                                 f"size; allowed: a sum <= {total}")


def validate_head_room(teams: Sequence[TeamSettings], head_pool: Pool, per_node: int) -> None:
    """Every team's ``maxRuns`` heads at once fit the head pool at its desired size (``per_node`` heads a node):
    Volcano places a run's head only with its whole gang, so heads beyond it would keep another team's runs
    waiting for a head while their GPUs, within their guarantee, stand idle."""
    slots = per_node * head_pool.nodes.desired
    runs = [(t.name, t.max_runs) for t in teams]
    if sum(n for _, n in runs) > slots:
        parts = " + ".join(f"{n} {r}" for n, r in runs)
        raise ValueError(f"workloads.teams[{runs[-1][0]}].maxRuns: the teams' runs at once sum to {sum(n for _, n in runs)} "
                         f"({parts}), more heads than the {slots} the head pool {head_pool.name} holds at its desired "
                         f"size ({head_pool.nodes.desired} nodes of {per_node} heads); allowed: a sum <= {slots}, or more "
                         f"nodes (pools[{head_pool.name}].nodes.desired)")
