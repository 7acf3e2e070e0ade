"""CUDA: several elements a thread for element-wise kernels.

By default a CUDA kernel gives each thread one iteration of its mapped members. For an element-wise kernel
(``exp(a + 1)``, ``gelu(x + b) + r``: statements with no loop of their own below the mapped band) that is
one load in flight per thread, and such kernels reached 58-67 % of the copy bandwidth on an H100 (session
13), where the cooperative-row kernels, with 8 loads a thread, reached 85-95 %.

Here the innermost mapped member's tile is ``threads * share`` iterations long, and its point loop ``p``
is split into ``t = p mod threads`` (``threadIdx.x``) and, below it, a loop over ``v = p div threads``
inside each thread, around the kernel's statements. For each ``v`` the block's threads take consecutive
iterations (coalesced, as before), and each thread runs ``share`` independent iterations whose loads nvcc
can issue together (the loop's trip count is a constant).

The split is legal whenever the member is parallel (coincident: no dependence between two of its
iterations under the same outer values), since any assignment of its iterations to threads and any order
of one thread's iterations then keep every dependence; the mapper's caller checks the tree again anyway.
It is taken only at known sizes, where every mapped member other than the innermost has tiles of 1 and the
kernel still launches :data:`MIN_BLOCKS` blocks.
"""

from __future__ import annotations

from collections.abc import Sequence

import islpy as isl

from polyfuse.ir.program import Program
from polyfuse.schedule.model import SMS

THREADS = 256
SHARE = 4
"""Threads of a block and iterations a thread. Measured on an H200 (session 24, 4096 x 4096, one run of
``cuda_acceptance.py``'s element sweep, % of the device-to-device copy bandwidth): add_exp 90 % with 256 x
4, 88 % with 256 x 8, 89 % with 128 x 8, 47 % with one element a thread; chain4 97 %, 93 %, 94 % and 74 %."""
MIN_BLOCKS = 4 * SMS
"""Blocks the kernel must still launch with the longer tiles (four for each of an H100's SMs)."""


def element_share(prog: Program, statements: Sequence[str], band_members: int, sizes: Sequence[int],
                  extents: Sequence[int]) -> tuple[int, int]:
    """``(threads, share)``: the block's threads along ``x`` and how many iterations of the innermost mapped
    member each takes, or ``(0, 1)`` where the kernel keeps one a thread. It qualifies when its statements
    are all as deep as the band (no loop below it), ``sizes`` tile every band member (the outer ones by 1),
    the ``extents`` are known (0: unknown) with at least ``threads * share`` iterations of the innermost
    member, and it still launches :data:`MIN_BLOCKS` blocks. (The module's constants are read at each
    call, so that a benchmark can sweep them.)"""
    threads, share = THREADS, SHARE
    no = (0, 1)
    if share <= 1 or not sizes or len(sizes) != band_members or any(s != 1 for s in sizes[:-1]):
        return no
    if any(prog.statement(s).depth != band_members for s in statements):
        return no
    if len(extents) != len(sizes) or not all(extents):
        return no
    length = threads * share
    blocks = -(-extents[-1] // length)
    for e in extents[:-1]:
        blocks *= e
    return (threads, share) if extents[-1] >= length and blocks >= MIN_BLOCKS else no


def split_threads(point: isl.ScheduleNode, threads: int) -> isl.ScheduleNode:
    """The point band at ``point`` with its last member ``p`` replaced by ``p mod threads`` (coincident,
    mapped to ``threadIdx.x``) and a band over ``p div threads`` below it (each thread's own loop);
    returns the point band."""
    ctx = point.get_ctx()
    schedule = point.band_get_partial_schedule()
    n = point.band_n_member()
    last = schedule.get_union_pw_aff(n - 1)
    count = isl.Val.int_from_si(ctx, threads)
    thread = last.mod_val(count)
    own = isl.MultiUnionPwAff.from_union_pw_aff(last.sub(thread).scale_down_val(count))
    permutable = point.band_get_permutable()
    coincident = [point.band_member_get_coincident(k) for k in range(n)]
    node = point.delete()
    node = node.insert_partial_schedule(own)
    node = node.insert_partial_schedule(schedule.set_union_pw_aff(n - 1, thread))
    node = node.band_set_permutable(int(permutable))
    for k, c in enumerate(coincident):
        node = node.band_member_set_coincident(k, int(c))
    return node
