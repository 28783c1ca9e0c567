#!/usr/bin/env bash
# The whole GPU test suite and the benchmarks in one call on a lent GPU machine; results under $OUT.
# Carry: .whl (tools/build_wheelhouse.sh), .gl (Vulkan loader), .vk (glslang + lavapipe debs, optional).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/peak-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [ -d .gl ]; then for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; fi
if [ -d .vk ]; then  # glslang and Mesa's lavapipe, unpacked beside / so they cannot break the image
    mkdir -p /tmp/vk && for f in .vk/*.deb; do dpkg -x "$f" /tmp/vk; done
    export PATH=/tmp/vk/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/vk/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
    # The ICD manifest names an absolute library path; point it into the unpacked tree.
    sed "s#/usr/lib/x86_64-linux-gnu#/tmp/vk/usr/lib/x86_64-linux-gnu#" \
        /tmp/vk/usr/share/vulkan/icd.d/lvp_icd.x86_64.json > /tmp/vk/lvp_icd.json
fi
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
export PEAK_MCP_JOB_TIMEOUT=${PEAK_MCP_JOB_TIMEOUT:-20}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
python3 -m peak_mcp doctor > "$OUT/doctor.json" 2> "$OUT/doctor.log"; echo "doctor rc=$?"
timeout 420 python3 -m pytest -q -m "gpu or vulkan" -p no:cacheprovider -rs ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest.txt"
for dtype in ${DTYPES:-f32}; do
    timeout 300 python3 tools/bench_matmul.py --backend cuda --dtype "$dtype" --size "${SIZE:-4096}" \
        --data-dir /tmp/peak-bench --out "$OUT/bench_cuda_$dtype.json" 2> "$OUT/bench_cuda_$dtype.log"
done
if [ -n "${HLSL:-}" ]; then
    timeout 300 python3 tools/bench_matmul.py --backend hlsl --size "${SIZE:-4096}" --data-dir /tmp/peak-bench-vk \
        --out "$OUT/bench_hlsl.json" 2> "$OUT/bench_hlsl.log"
    if [ -f /tmp/vk/lvp_icd.json ] && [ -n "${LAVAPIPE_SIZE:-}" ]; then  # the same shaders on Mesa's CPU Vulkan
        VK_DRIVER_FILES=/tmp/vk/lvp_icd.json timeout 400 python3 tools/bench_matmul.py --backend hlsl \
            --size "$LAVAPIPE_SIZE" --data-dir /tmp/peak-bench-lvp --out "$OUT/bench_lavapipe.json" \
            2> "$OUT/bench_lavapipe.log"
    fi
fi
