"""Hand-offs between the devices of neighbouring chunks: activations forward, their gradients
backward. On a mesh each boundary follows its inter-group strategy (paper sec. V-C,
:mod:`palm.network.intergroup`), and the reduction of a Megatron layer's partial output moves
into the hand-off; on a GPU cluster it is Megatron's scatter/gather between peer devices."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from palm.hardware.spec import GpuClusterHardware, Mesh2DHardware
from palm.network.intergroup import HandOff
from palm.network.intergroup import hand_off as intergroup_hand_off
from palm.network.loads import LinkLoad, Profile, cluster_one_to_one_profile, profile
from palm.plan.context import PlanContext
from palm.plan.rings import NO_TRANSFER, flat, stage_block
from palm.workload.ops import TransformerLayer

__all__ = ["HandOffs", "hand_offs"]


@dataclass(frozen=True)
class HandOffs:
    """The hand-offs of every chunk boundary ``c -> c + 1``.

    ``partial_out[c]``: chunk ``c``'s last forward all-reduce is taken by the hand-off;
    ``partial_in[c]``: chunk ``c``'s first input-gradient all-reduce likewise.
    """

    forward: tuple[HandOff | None, ...]
    backward: tuple[HandOff | None, ...]
    send_profiles: tuple[Profile, ...]
    grad_profiles: tuple[Profile, ...]
    partial_out: tuple[bool, ...]
    partial_in: tuple[bool, ...]

    def send_s(self, c: int, nbytes: float, *, backward: bool = False) -> float:
        """Seconds of the hand-off after chunk ``c`` (0 after the last chunk)."""
        hands = self.backward if backward else self.forward
        profiles = self.grad_profiles if backward else self.send_profiles
        return _hand_off_time(hands, profiles, c, nbytes, len(self.partial_out))


def hand_offs(ctx: PlanContext) -> HandOffs:
    if ctx.mesh:
        return _mesh_hand_offs(ctx)
    # a GPU cluster: Megatron's scatter/gather between peer devices, priced once per pair of
    # stages (the boundaries of every virtual pipeline repeat them)
    n, pp = ctx.n_chunks, ctx.config.parallelism.pp
    peers: dict[tuple[int, int], Profile] = {}

    def peer(src: int, dst: int) -> Profile:
        if (src, dst) not in peers:
            peers[src, dst] = _peer_profile(ctx, src, dst)
        return peers[src, dst]

    return HandOffs(
        forward=(None,) * (n - 1),
        backward=(None,) * (n - 1),
        send_profiles=tuple(peer(c % pp, (c + 1) % pp) for c in range(n - 1)),
        grad_profiles=tuple(peer((c + 1) % pp, c % pp) for c in range(n - 1)),
        partial_out=(False,) * n,
        partial_in=(False,) * n,
    )


def _peer_profile(ctx: PlanContext, src: int, dst: int) -> Profile:
    a, z = ctx.array(src), ctx.array(dst)
    hw, devices = ctx.config.hardware, ctx.config.parallelism.devices
    if isinstance(hw, GpuClusterHardware) and a.shape == z.shape:  # device i to device i
        return cluster_one_to_one_profile(
            hw, a, z, devices=devices, with_links=ctx.with_links, block=stage_block(ctx.config)
        )
    return profile(
        hw, flat(a, ctx.mesh), flat(z, ctx.mesh), devices=devices, with_links=ctx.with_links
    )


def _mesh_hand_offs(ctx: PlanContext) -> HandOffs:
    hw, comm = ctx.config.hardware, ctx.config.communication
    assert isinstance(hw, Mesh2DHardware)
    n_chunks, tp, sp, training = ctx.n_chunks, ctx.tp, ctx.sp, ctx.training
    strategies = comm.boundary_strategies or (comm.inter_group,) * (n_chunks - 1)
    forward: list[HandOff | None] = [None] * (n_chunks - 1)
    backward: list[HandOff | None] = [None] * (n_chunks - 1)
    partial_out = [False] * n_chunks
    partial_in = [False] * n_chunks
    for c in range(n_chunks - 1):
        last, first = ctx.ops(c)[-1], ctx.ops(c + 1)[0]
        nbytes = last.output_bytes(batch=ctx.micro_batch, act_bytes=ctx.act_bytes)
        partial_out[c] = tp > 1 and not sp and isinstance(last, TransformerLayer)
        partial_in[c + 1] = training and tp > 1 and not sp and isinstance(first, TransformerLayer)
        src, dst = ctx.array(ctx.stage_of(c)), ctx.array(ctx.stage_of(c + 1))
        forward[c] = intergroup_hand_off(
            hw,
            src=src,
            dst=dst,
            nbytes=nbytes,
            strategy=strategies[c],
            adapters=comm.adapters,
            partial=partial_out[c],
            with_links=ctx.with_links,
        )
        if training:
            backward[c] = intergroup_hand_off(
                hw,
                src=dst,
                dst=src,
                nbytes=nbytes,
                strategy=strategies[c],
                adapters=comm.adapters,
                partial=partial_in[c + 1],
                with_links=ctx.with_links,
            )
    return HandOffs(
        forward=tuple(forward),
        backward=tuple(backward),
        send_profiles=tuple(_merged(h) for h in forward if h is not None),
        grad_profiles=tuple(_merged(h) if h is not None else NO_TRANSFER for h in backward),
        partial_out=tuple(partial_out),
        partial_in=tuple(partial_in),
    )


def _hand_off_time(
    hands: Sequence[HandOff | None],
    profiles: Sequence[Profile],
    c: int,
    send_bytes: float,
    n_chunks: int,
) -> float:
    if c + 1 >= n_chunks:
        return 0.0
    hand = hands[c] if c < len(hands) else None
    return hand.total_s if hand is not None else profiles[c].time(send_bytes)


def _merged(hand: HandOff) -> Profile:
    """One profile standing for a whole hand-off, carrying the link loads of all its parts
    (for the event engine's per-link mode)."""
    links = [p.links for p in hand.profiles if p.links is not None]
    merged = None
    if links:
        merged = LinkLoad(
            np.concatenate([x.ids for x in links]), np.concatenate([x.loads for x in links])
        )
    first = hand.profiles[0]
    return Profile(first.latency_s, first.bandwidth_Bps, first.hops, merged)
