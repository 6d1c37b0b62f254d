# -*- Python -*-
# lit configuration of moec's regression tests (FileCheck-based).

import os
import shutil

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "MOEC"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.moec_obj_root, "test")
# Unit/ is its own suite (GoogleTest format); lit.cfg.py files are not tests.
config.excludes = ["Unit", "lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt"]

llvm_config.use_default_substitutions()
config.substitutions.append(("%moec_src", config.moec_src_root))
config.substitutions.append(("%mlir_include", config.mlir_include_dir))

llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
tool_dirs = [config.moec_tools_dir, config.llvm_tools_dir]
tools = ["moec-opt", "moec", "mlir-tblgen", "not", ToolSubst("FileCheck", unresolved="fatal")]
llvm_config.add_tool_substitutions(tools, tool_dirs)
# `moec compile` assembles sm_90a PTX with ptxas where it finds one (as
# lib/Target/Compile.cpp looks: CUDA_HOME, PATH, /usr/local/cuda): tests
# of ptxas's own output need it.
_cuda_home = os.environ.get("CUDA_HOME", "")
if (shutil.which("ptxas") or
        (_cuda_home and os.access(os.path.join(_cuda_home, "bin", "ptxas"), os.X_OK)) or
        os.access("/usr/local/cuda/bin/ptxas", os.X_OK)):
    config.available_features.add("ptxas")
