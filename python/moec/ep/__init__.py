"""moec.ep: expert parallelism. `ExpertParallelMoE` splits an MoE block's
experts over the ranks of a torch.distributed group; `ep_module` is the
MLIR it runs (for AOT bundles). Its parts: moec.ep.kernels (the layer's
moec kernels), moec.ep.exchange (the all-to-alls of rows), moec.ep.peer
(the copy-engine transport), moec.ep.dedup (each token sent once per
rank). docs/expert_parallel.md."""

from ._layer import TRANSPORTS, ExpertParallelMoE, ep_module
from .kernels import DEDUP_KERNELS, KERNELS, ep_kernels, expert_groups

__all__ = ["DEDUP_KERNELS", "KERNELS", "TRANSPORTS", "ExpertParallelMoE",
           "ep_kernels", "ep_module", "expert_groups"]
