"""ptxas from pip's nvidia-cuda-nvcc, on machines without the CUDA toolkit.

The compiler looks for ptxas at $MOEC_PTXAS, in $CUDA_HOME/bin, on PATH and
in /usr/local/cuda/bin (moec::findPtxas); where none has one, the package
points $MOEC_PTXAS at the ptxas of the pip package nvidia-cuda-nvcc (CUDA
13: nvidia/cu13/bin; nvidia-cuda-nvcc-cu12: nvidia/cuda_nvcc/bin), so that
`pip install moec[cuda]` alone assembles cubins. Without any, the sm_*
targets ship PTX (the driver compiles it when the bundle loads) and the
compile's note says what to install.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Optional

from ._log import logger

# Where nvidia-cuda-nvcc puts ptxas, under the `nvidia` namespace package.
_PIP_LAYOUTS = (("cu13", "bin", "ptxas"), ("cuda_nvcc", "bin", "ptxas"))
_checked = False


def pip_ptxas() -> Optional[str]:
    """The ptxas of an installed nvidia-cuda-nvcc, or None."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        for parts in _PIP_LAYOUTS:
            path = os.path.join(root, *parts)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return None


def use_pip_ptxas(compiler) -> None:
    """Once per process: where `compiler` (moec._compiler) finds no ptxas,
    $MOEC_PTXAS := pip's, if there is one."""
    global _checked
    if _checked:
        return
    _checked = True
    if os.environ.get("MOEC_PTXAS") or compiler.find_ptxas():
        return
    path = pip_ptxas()
    if path:
        os.environ["MOEC_PTXAS"] = path
        logger.debug("ptxas from pip's nvidia-cuda-nvcc: %s", path)
