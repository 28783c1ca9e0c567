#!/usr/bin/env bash
# KernelBench's metric on a lent GPU machine: `peak-mcp batch` over a folder of KernelBench files and a folder of CUDA
# kernels (<file stem>.cu), every GPU of the machine at once; batch.md, batch.json and batch.log under $OUT.
#
# Here, first:   tools/kernelbench_batch.sh prepare
#     copies the files named in tools/kernelbench_batch/problems.txt out of the KernelBench mirror ($KB_MIRROR, a git
#     dir) into build/kernelbench/ (ignored by git; carry it); PROBLEMS_LIST names another list; LEVEL=level1 takes
#     a whole level instead.
# There:         OUT=... tools/kernelbench_batch.sh            (carry .whl, from tools/build_wheelhouse.sh, and
#     build/kernelbench). PROBLEMS (default build/kernelbench), KERNELS (default tools/kernelbench_batch/kernels),
#     MAP (a JSON map problem -> kernel, optional), P (default "0 1 1.5 2"), BATCH_TIMEOUT (seconds, default 560).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = prepare ]; then
    mirror=${KB_MIRROR:-/work/.mirror/ScalingIntelligence+KernelBench/repo}
    rm -rf build/kernelbench && mkdir -p build/kernelbench
    if [ -n "${LEVEL:-}" ]; then
        files=$(git -C "$mirror" ls-tree --name-only "HEAD:KernelBench/$LEVEL" | grep '\.py$' | sed "s#^#$LEVEL/#")
    else
        files=$(grep -v '^#' "${PROBLEMS_LIST:-tools/kernelbench_batch/problems.txt}")
    fi
    for f in $files; do
        git -C "$mirror" show "HEAD:KernelBench/$f" > "build/kernelbench/$(basename "$f")" || exit 1
    done
    echo "$(ls build/kernelbench | wc -l) KernelBench files in build/kernelbench: carry it with .whl"
    exit 0
fi
OUT=${OUT:-/tmp/peak-out}
PROBLEMS=${PROBLEMS:-build/kernelbench}
KERNELS=${KERNELS:-tools/kernelbench_batch/kernels}
mkdir -p "$OUT"
[ -d "$PROBLEMS" ] || { echo "no $PROBLEMS: run 'tools/kernelbench_batch.sh prepare' here and carry it"; exit 2; }
if [ -d .whl ]; then  # the wheels the GPU image lacks (mcp, pydantic-settings, structlog, ...), as gpu_suite.sh
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl || { echo "wheel install failed"; exit 1; }
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
data=$(mktemp -d /tmp/peak-batch.XXXX)  # a fresh data dir: its sessions are this batch's alone
# shellcheck disable=SC2086  # P is a list of numbers
timeout "${BATCH_TIMEOUT:-560}" python3 -m peak_mcp --data-dir "$data" batch --problems "$PROBLEMS" \
    --kernels "$KERNELS" ${MAP:+--map "$MAP"} --backend cuda --p ${P:-0 1 1.5 2} --out "$OUT" 2> "$OUT/batch.log"
rc=$?
echo "batch rc=$rc"  # the table went to stdout above; without one, the log says why
[ -f "$OUT/batch.md" ] || tail -30 "$OUT/batch.log"
exit $rc
