"""The copy-engine transport of moec.ep: an all-to-all of rows written by
each rank's copy engines straight into the other ranks' buffers, so that
no SM moves a byte and the grouped matmuls beside it keep the whole GPU.

The receive buffer is one torch symmetric-memory allocation per
(group, device) (torch.distributed._symmetric_memory: every rank maps the
others' buffers), shared by every ExpertParallelMoE of the group. Each
exchange, on the transport's own stream:

1. a barrier (torch's, one small kernel): every rank has finished what it
   queued before, so the regions about to be written are no longer read
   (left out where the caller knows they are unread since an earlier
   barrier: expert_chunks' later exchanges);
2. one cudaMemcpyAsync per destination rank (torch's copy_ into the peer's
   mapped buffer: "Memcpy PtoP", the copy engines), each at the offset the
   receiver reads it from. The copy to this rank's own region runs on one
   stream, beside those over NVLink in sequence on another, each rank's
   starting with the next rank's (rank r puts to r + 1, r + 2, ...);
3. a barrier: every rank's rows have arrived.

The offsets come from the row counts every rank already knows after
moec.ep's all_gather of the per-expert counts (`copies`), so nothing else
is exchanged. Ranks must issue exchanges in the same order, as for any
collective. docs/expert_parallel.md has the measurements.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

__all__ = [
    "ALIGN", "PeerBuffers", "aligned", "buffers", "copies", "expert_chunks",
    "region_rows", "transposed",
]

#: Byte alignment of each receive region (TMA and vector loads need 16).
ALIGN = 256


def aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def copies(matrix: list, rank: int) -> list:
    """The puts of one exchange, from `rank`: (destination, first row in the
    send buffer, first row in the destination's receive region, rows), one
    per destination with rows. `matrix[i][j]`: rows rank i sends to rank j;
    a sender's rows are grouped by destination, a receiver's by source
    (all_to_all_single's layout)."""
    result, start = [], 0
    for dest, count in enumerate(matrix[rank]):
        if count:
            at = sum(matrix[source][dest] for source in range(rank))
            result.append((dest, start, at, count))
        start += count
    return result


def region_rows(matrix: list) -> int:
    """Rows the largest receiver of the exchange takes (the region every
    rank reserves for it)."""
    return max((sum(row[j] for row in matrix) for j in range(len(matrix))),
               default=0)


def expert_chunks(counts: list, rank: int, groups: list) -> list:
    """The exchanges of a forward that moves and computes the local experts
    in groups of the sizes `groups` (ExpertParallelMoE's expert_chunks), from
    `rank`. `counts[s][d][l]`: rows rank s sends to local expert l of rank
    d (a sender's rows grouped by destination, then by local expert). Per
    group p, a dict: `out`, the puts of p's rows to their experts' ranks
    (as `copies`: destination, first row in the send buffer, first row in
    the destination's region, rows); `received`, the rows this rank's
    region gets (from each source, p's experts in order); `region_rows`,
    the region every rank reserves (the largest receiver's); `back`, the puts
    of the results to where each row was in its sender's send buffer (all
    groups' results land in one region shaped like the send buffer)."""
    W = len(counts)
    start = [[sum(sum(counts[s][e]) for e in range(d)) for d in range(W)]
             for s in range(W)]
    phases = []
    for p, size in enumerate(groups):
        lo = sum(groups[:p])
        hi = lo + size
        n = [[sum(counts[s][d][lo:hi]) for d in range(W)] for s in range(W)]
        first = [[start[s][d] + sum(counts[s][d][:lo]) for d in range(W)]
                 for s in range(W)]
        at = [[sum(n[i][d] for i in range(s)) for d in range(W)]
              for s in range(W)]
        phases.append(dict(
            out=[(d, first[rank][d], at[rank][d], n[rank][d])
                 for d in range(W) if n[rank][d]],
            back=[(s, at[s][rank], first[s][rank], n[s][rank])
                  for s in range(W) if n[s][rank]],
            received=sum(n[s][rank] for s in range(W)),
            region_rows=region_rows(n)))
    return phases


def transposed(matrix: list) -> list:
    return [list(column) for column in zip(*matrix)]


class _Done:
    """The exchange's work handle: wait() makes the current stream wait for
    its rows (as an NCCL Work)."""

    def __init__(self, event: torch.cuda.Event, device: torch.device):
        self.event, self.device = event, device

    def wait(self) -> None:
        torch.cuda.current_stream(self.device).wait_event(self.event)


class PeerBuffers:
    """The symmetric receive buffer of one (group, device), its mapped views
    of the other ranks' buffers, and the stream the exchanges run on."""

    def __init__(self, group, device: torch.device):
        self.group, self.device = group, device
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.stream = torch.cuda.Stream(device)
        # Local copy, remote copies.
        self._put_streams = [torch.cuda.Stream(device) for _ in range(2)]
        self.capacity = 0
        self._buffer: Optional[torch.Tensor] = None
        self._handle = None
        self._peers: list = []

    def reserve(self, nbytes: int) -> None:
        """Grows the buffer to at least `nbytes` (a collective: every rank
        passes the same value, computed from the shared counts)."""
        if nbytes <= self.capacity and self._handle is not None:
            return  # (a first forward with no rows anywhere still allocates)
        from torch.distributed import _symmetric_memory as symm_mem
        # Geometric growth: a rendezvous costs seconds the first time.
        capacity = max(aligned(nbytes), self.capacity * 3 // 2, 1)
        capacity = -(-capacity // (1 << 20)) << 20
        if self._buffer is not None:
            # No rank may still write into the buffers about to go.
            torch.cuda.synchronize(self.device)
            dist.barrier(group=self.group)
            torch.cuda.synchronize(self.device)
        self._peers, self._handle, self._buffer = [], None, None
        buffer = symm_mem.empty(capacity, dtype=torch.uint8,
                                device=self.device)
        handle = symm_mem.rendezvous(buffer, self.group)
        self._peers = [handle.get_buffer(r, (capacity,), torch.uint8)
                       for r in range(self.world_size)]
        self._buffer, self._handle, self.capacity = buffer, handle, capacity

    def exchange(self, rows: torch.Tensor, puts: list, received: int,
                 region: int, keep: bool, async_op: bool,
                 after: Optional[torch.cuda.Event] = None,
                 fence: bool = True) -> tuple:
        """Row blocks of `rows` to the other ranks' receive regions at byte
        offset `region`: `puts` lists (destination, first row in `rows`,
        first row in the destination's region, rows), as `copies` makes
        them. Returns (the first `received` rows of this rank's region,
        work handle or None). With `keep` they are copied out into a tensor
        of their own (autograd keeps them), else the result is a view of
        the region, valid until the group's next exchange into it (the
        next forward). The copies start after what the current stream has
        queued, or with `after` after that event only (rows made earlier,
        so that they need not wait for later work). `fence=False` leaves
        out the first barrier: only for an exchange into a region that
        nothing has read since an earlier fenced exchange of the group."""
        if after is not None and (keep or not rows.is_contiguous()):
            # The copy-out buffer or a contiguous copy would be made on the
            # current stream after `after`: the puts would not wait for it.
            raise ValueError("exchange(after=...) takes contiguous rows and "
                             "keep=False")
        shape = tuple(rows.shape[1:])
        row_bytes = rows.element_size() * int(torch.Size(shape).numel())
        if region + received * row_bytes > self.capacity:
            raise RuntimeError(f"moec.ep: copy-engine exchange of "
                               f"{received} rows at offset {region} "
                               f"overflows the {self.capacity}-byte buffer")
        rows = rows.contiguous()
        current = torch.cuda.current_stream(self.device)
        out = rows.new_empty((received,) + shape) if keep else None
        if after is None:
            self.stream.wait_stream(current)
        else:
            self.stream.wait_event(after)
        with torch.cuda.stream(self.stream):
            if fence:
                self._handle.barrier(channel=0)
            send = rows.view(torch.uint8).view(-1)
            ready = self.stream.record_event()
            for put in self._put_streams:
                put.wait_event(ready)
            # The copy into this rank's own region on one stream, the
            # others in sequence on another, rank r's to r + 1, r + 2, ...
            # first: every rank starting with the same destination made
            # four H200s' exchange take twice as long.
            W = self.world_size
            for dest, first, at, count in sorted(
                    puts, key=lambda put: (put[0] - self.rank) % W):
                put = self._put_streams[0 if dest == self.rank else 1]
                with torch.cuda.stream(put):
                    start = region + at * row_bytes
                    self._peers[dest][start:start + count * row_bytes].copy_(
                        send[first * row_bytes:(first + count) * row_bytes])
            for put in self._put_streams:
                rows.record_stream(put)
                self.stream.wait_stream(put)
            self._handle.barrier(channel=0)
            view = self._buffer[region:region + received * row_bytes].view(
                rows.dtype).view((received,) + shape)
            if keep:
                out.copy_(view)
        # The allocator must not hand these out again before the copies.
        rows.record_stream(self.stream)
        if keep:
            out.record_stream(self.stream)
        event = torch.cuda.Event()
        event.record(self.stream)
        done = _Done(event, self.device)
        if not async_op:
            done.wait()
            done = None
        return (out if keep else view), done


_BUFFERS: dict = {}


def buffers(group, device: torch.device) -> PeerBuffers:
    """The shared PeerBuffers of (group, device): of this very group object
    (a group made again after destroy_process_group gets new ones)."""
    key = (tuple(dist.get_process_group_ranks(group)), device)
    if key not in _BUFFERS or _BUFFERS[key].group is not group:
        try:
            from torch.distributed import _symmetric_memory as symm_mem
            usable = all(hasattr(symm_mem, name)
                         for name in ("empty", "rendezvous"))
        except ImportError:
            usable = False
        if not usable:
            raise RuntimeError(
                f"moec.ep: transport='copy_engine' needs torch's symmetric "
                f"memory (torch.distributed._symmetric_memory.empty and "
                f"rendezvous; tested with PyTorch 2.11, this is "
                f"{torch.__version__})")
        _BUFFERS[key] = PeerBuffers(group, device)
    return _BUFFERS[key]
