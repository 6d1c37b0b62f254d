"""The row exchanges of moec.ep: one all-to-all of rows between the ranks
of a group, over NCCL / gloo (`all_to_all_single`) or the copy engines
(moec.ep.peer), and its autograd Function (the backward is the reverse
exchange)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import peer as _peer

__all__ = [
    "AllToAll", "Exchange", "exchange", "start_exchange", "wait",
]


class Exchange:
    """One all-to-all of rows: `matrix[i][j]` rows go from rank i to rank j
    (a sender's grouped by destination, a receiver's by source, as
    all_to_all_single). Over NCCL (all_to_all_single) or, with `peers`
    (moec.ep.peer.PeerBuffers), the copy engines into the byte offset
    `region` of the receivers' buffers; `reverse_region` is where the
    reverse exchange (the backward's) lands."""

    def __init__(self, matrix: list, rank: int, group, peers=None,
                 region: int = 0, reverse_region: int = 0):
        self.matrix, self.rank, self.group, self.peers = (matrix, rank,
                                                          group, peers)
        self.region, self.reverse_region = region, reverse_region

    @property
    def send_splits(self) -> list:
        return list(self.matrix[self.rank])

    @property
    def recv_splits(self) -> list:
        return [row[self.rank] for row in self.matrix]

    def reversed(self) -> "Exchange":
        return Exchange(_peer.transposed(self.matrix), self.rank,
                         self.group, self.peers, self.reverse_region,
                         self.region)

    def start(self, rows: torch.Tensor, async_op: bool, keep: bool,
              fence: bool = True) -> tuple:
        """(received rows, work handle to wait on before reading them, or
        None when not `async_op`). `keep`: the result must outlive the next
        exchange (autograd saves it). `fence=False`: the copy engines skip
        the first barrier (PeerBuffers.exchange's)."""
        if self.peers is not None:
            return self.peers.exchange(
                rows, _peer.copies(self.matrix, self.rank),
                sum(self.recv_splits), self.region, keep, async_op,
                fence=fence)
        return start_exchange(rows, self.send_splits, self.recv_splits,
                               self.group, async_op)


class AllToAll(torch.autograd.Function):
    """An Exchange of rows; its backward is the reverse exchange of the
    gradients. With a `pending` list, the forward exchange runs
    asynchronously and its work handle is appended there: wait on it
    before the result is read (the backward's exchange is synchronous)."""

    @staticmethod
    def forward(ctx, rows, exchange, pending=None):
        ctx.exchange = exchange
        out, work = exchange.start(rows, pending is not None, keep=True)
        if pending is not None:
            pending.append(work)
        return out

    @staticmethod
    def backward(ctx, grad):
        return (ctx.exchange.reversed().start(grad.contiguous(), False,
                                              keep=True)[0], None, None)


def exchange(rows: torch.Tensor, send_splits: list, recv_splits: list,
              group) -> torch.Tensor:
    """`rows` [S, ...] out in `send_splits` row blocks, in from every rank
    in `recv_splits`: [sum(recv_splits), ...] (NCCL or gloo)."""
    return start_exchange(rows, send_splits, recv_splits, group, False)[0]


def start_exchange(rows: torch.Tensor, send_splits: list,
                    recv_splits: list, group, async_op: bool) -> tuple:
    """exchange()'s result and, if `async_op`, the work handle to wait on
    before reading it (else None)."""
    out = rows.new_empty((sum(recv_splits),) + tuple(rows.shape[1:]))
    # Only bytes move: bf16 travels as f16 (gloo has no bf16).
    word = torch.float16 if rows.dtype == torch.bfloat16 else rows.dtype
    work = dist.all_to_all_single(out.view(word), rows.contiguous().view(word),
                                  output_split_sizes=recv_splits,
                                  input_split_sizes=send_splits, group=group,
                                  async_op=async_op)
    return out, work


def wait(state: dict) -> None:
    """Waits for the state's asynchronous exchanges (the current stream
    waits on NCCL's; gloo blocks)."""
    for work in state["pending"]:
        work.wait()
    state["pending"].clear()
