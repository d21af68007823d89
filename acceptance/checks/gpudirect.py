"""The gpudirect check: nvidia_peermem loaded, else dma-buf supported (through cupy), on a GPU node;
decided as the preflight suite decides it (acceptance.host.nodefacts.gpudirect_path)."""

from __future__ import annotations

from ..host import nodefacts
from .base import Context, Outcome, Problem, error, judged, skip


def check(ctx: Context) -> Outcome:
    if not ctx.profile.get("preflight.gpudirect"):
        return skip("gpudirect", "the profile sets preflight.gpudirect = false")
    if not nodefacts.gpu_count(ctx.root):
        return skip("gpudirect", "no NVIDIA GPU on this node")
    peer = nodefacts.peermem(ctx.root)
    dmabuf = None
    if not peer:
        try:
            dmabuf = nodefacts.dmabuf_supported()
        except nodefacts.Unavailable as e:
            dmabuf = e
    usable, how = nodefacts.gpudirect_path(peer, dmabuf)
    if not usable and isinstance(dmabuf, nodefacts.Unavailable):
        return error("gpudirect", how)
    return judged("gpudirect", [] if usable else [Problem("GPUDirect RDMA", how)], how)
