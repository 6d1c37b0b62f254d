"""moec.language: writing kernels. `Tensor[...]` annotations, the element
types, and `ops` (the moe dialect's ops, appended to the function being
traced). `@moec.kernel` (moec.compiler) traces a function of them."""

from . import ops
from ._dtypes import FLOATS, FP8, NAMES as DTYPES
from ._ir import T, Tensor, TensorSpec

__all__ = ["DTYPES", "FLOATS", "FP8", "T", "Tensor", "TensorSpec", "ops"]
