#!/usr/bin/env bash
# The wheel on the GPU machine (bench/results/wheel-jit-h200.md): no LLVM,
# no bundles and no source tree on the import path.
#
#   bench/wheel_jit.sh WHEEL [OUT]     (from the repository root, on the GPU)
#
# pip installs WHEEL (make wheel PYTHON=python3.12) into a fresh venv
# /tmp/venv, with torch, transformers and peft from the machine's Python
# through a .pth file; then runs examples/finetune_moe.py and
# examples/finetune_lora.py, copied to /tmp/run, twice each with --check:
# into an empty compile cache (the kernels compile on first use), then
# from it. Writes OUT (default $OUT, else /tmp/out)/setup.log, runs.log and
# each run's log; MOEC_LOG=info logs every compile over a second.
set -uo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: bench/wheel_jit.sh WHEEL [OUT]" >&2
  exit 2
fi
wheel=$(realpath "$1")
out=${2:-${OUT:-/tmp/out}}
mkdir -p "$out" /tmp/run
rm -rf /tmp/venv /tmp/moec-cache
cp examples/finetune_moe.py examples/finetune_lora.py /tmp/run/
cd /tmp/run
unset PYTHONPATH
elapsed() { python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$1"; }
{
echo "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(nproc) cores, $(. /etc/os-release; echo $PRETTY_NAME), $(ldd --version | head -1)"
echo "LLVM on the machine: $(ls -d /usr/lib/llvm-* 2>/dev/null | tr '\n' ' ')($(ls /usr/lib/llvm-*/lib/libMLIR* 2>/dev/null | wc -l) libMLIR files)"
echo "wheel: $(basename "$wheel") $(stat -c %s "$wheel") bytes"
python3 -m venv /tmp/venv
system=$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
own=$(/tmp/venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
echo "$system" > "$own/machine-torch.pth"
start=$(date +%s.%N)
/tmp/venv/bin/pip install -q --no-deps --no-index --disable-pip-version-check "$wheel"
echo "pip install: $(elapsed "$start") s"
/tmp/venv/bin/python -c "import moec; print('moec', moec.__version__, 'from', moec.__file__, '| target_for(cuda):', moec.target_for('cuda'), '| compiler:', moec.has_compiler())"
module=$(/tmp/venv/bin/python -c 'import importlib.util as u; print(u.find_spec("moec._compiler").origin)')
echo "moec._compiler links: $(ldd "$module" | awk '{print $1}' | tr '\n' ' ')"
/tmp/venv/bin/moec --help | head -2
echo "ptxas: $(command -v ptxas)"
} 2>&1 | tee "$out/setup.log"
export MOEC_CACHE_DIR=/tmp/moec-cache MOEC_LOG=info
for script in finetune_moe finetune_lora; do
  for run in cold cached; do
    start=$(date +%s.%N)
    /tmp/venv/bin/python "$script.py" --check > "$out/$script.$run.log" 2>&1
    rc=$?
    wall=$(elapsed "$start")
    compiles=$(grep -c "compiled .* (cache miss)" "$out/$script.$run.log")
    compile_s=$(grep -o "in [0-9.]* s (cache miss)" "$out/$script.$run.log" | awk '{s += $2} END {printf "%.1f", s}')
    echo "RESULT $script $run rc=$rc wall=${wall}s logged_compiles=$compiles compile_sum=${compile_s}s"
    grep -E "tokens/s|loss fell|final" "$out/$script.$run.log"
  done
done 2>&1 | tee "$out/runs.log"
/tmp/venv/bin/moec cache list | tail -2 | tee -a "$out/runs.log"
