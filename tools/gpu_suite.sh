#!/usr/bin/env bash
# The whole GPU test suite and the benchmarks in one call on a lent GPU machine; results under $OUT.
# Carry: .whl (tools/build_wheelhouse.sh), .gl (Vulkan loader), .vk (glslang + lavapipe debs, optional).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/peak-out}
# The device returns at most 8 files from $OUT: results collect here and travel back as one tarball.
RESULTS=$(mktemp -d /tmp/peak-results.XXXX)
mkdir -p "$OUT"
trap 'tar czf "$OUT/results.tgz" -C "$RESULTS" .' EXIT
# once per machine: suites started side by side (one per GPU) must not install into /tmp/site at the same time
if [ ! -e /tmp/site/.peak-installed ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "wheel install failed"; exit 1; }
    touch /tmp/site/.peak-installed
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [ -d .gl ]; then for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; fi
if [ -d .vk ]; then  # glslang and Mesa's lavapipe, unpacked beside / so they cannot break the image
    mkdir -p /tmp/vk && for f in .vk/*.deb; do dpkg -x "$f" /tmp/vk; done
    export PATH=/tmp/vk/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/vk/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
    [ -d /tmp/vk/usr/share/vulkan/explicit_layer.d ] && export VK_LAYER_PATH=/tmp/vk/usr/share/vulkan/explicit_layer.d
    # The ICD manifest names an absolute library path; point it into the unpacked tree.
    lvp=/tmp/vk/usr/share/vulkan/icd.d/lvp_icd.x86_64.json
    [ -f $lvp ] && sed "s#/usr/lib/x86_64-linux-gnu#/tmp/vk/usr/lib/x86_64-linux-gnu#" $lvp > /tmp/vk/lvp_icd.json
fi
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
export PEAK_MCP_JOB_TIMEOUT=${PEAK_MCP_JOB_TIMEOUT:-20}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$RESULTS/gpu.txt"
python3 -m peak_mcp doctor > "$RESULTS/doctor.json" 2> "$RESULTS/doctor.log"; echo "doctor rc=$?"

# PARTS picks what runs, so the suite can be split over calls that each fit the device's per-call limit.
# Not in the default PARTS: hostile, hostile_tests (the hostile-kernel corpus, tests/hostile/), lavapipe, ladder,
# hlsl_ladder, f32ladder, hlsl_reference, problems, attention, kbround, audit, convround, conv2d, kernelbench, false_failures, false_failures_kernel.
bench() {  # bench NAME ARGS...: one MCP session over stdio, JSON and log under $RESULTS
    local name=$1; shift
    echo "== bench $name"
    timeout "${BENCH_TIMEOUT:-300}" python3 tools/bench_matmul.py "$@" --data-dir "/tmp/peak-bench-$name" \
        --out "$RESULTS/bench_$name.json" 2> "$RESULTS/bench_$name.log" | tee "$RESULTS/bench_$name.txt"
}
for part in ${PARTS:-tests cuda cuda16 hlsl}; do
    case $part in
    tests)  # the hostile-kernel tests have their own parts (hostile, hostile_tests): they take minutes
        timeout "${TESTS_TIMEOUT:-540}" python3 -m pytest -q -m "gpu or vulkan" -p no:cacheprovider -rs ${PYTEST_ARGS:-} \
            --ignore=tests/test_hostile_cuda_gpu.py --ignore=tests/test_hostile_hlsl.py 2>&1 \
            | tee "$RESULTS/pytest.txt" ;;
    hostile)  # tests/hostile/manifest.yaml over stdio: a verdict table per backend (CUDA; HLSL on NVIDIA's Vulkan)
        for backend in ${HOSTILE_BACKENDS:-cuda hlsl}; do
            echo "== hostile $backend"
            PEAK_MCP_VK_FENCE_TIMEOUT_S=5 timeout "${HOSTILE_TIMEOUT:-280}" python3 tools/hostile_bench.py \
                --backend "$backend" ${HOSTILE_SIZES:+--sizes "$HOSTILE_SIZES"} --jobs "${HOSTILE_JOBS:-4}" \
                --gpus "$(nvidia-smi -L | grep -c '^GPU')" ${HOSTILE_ARGS:-} --data-dir "/tmp/peak-hostile-$backend" --out "$RESULTS/hostile_$backend.json" \
                2> "$RESULTS/hostile_$backend.log" | tee "$RESULTS/hostile_$backend.md"
            echo "hostile $backend rc=${PIPESTATUS[0]}"
        done ;;
    hostile_tests)  # the same manifest as pytest (in-process MCP client), one test per (kernel, size)
        timeout 540 python3 -m pytest -q -p no:cacheprovider -rs ${PYTEST_ARGS:-} tests/test_hostile_cuda_gpu.py \
            tests/test_hostile_hlsl.py 2>&1 | tee "$RESULTS/pytest_hostile.txt" ;;
    before)  # the tree before the verdict work (carry .before: git archive 5b11d66), for before/after phase times
        [ -d .before ] || { echo "before needs .before carried"; continue; }
        echo "== bench before"
        (cd .before && PYTHONPATH=/tmp/site:$PWD timeout 300 python3 tools/bench_matmul.py --backend cuda \
            --size "${SIZE:-4096}" --data-dir /tmp/peak-before --out "$RESULTS/bench_before.json" \
            2> "$RESULTS/bench_before.log" | tee "$RESULTS/bench_before.txt") ;;
    profile)  # where one validation's time goes, in-process
        timeout 200 python3 tools/bench_validate.py --size "${SIZE:-4096}" examples/matmul/cuda/double_buffered.cu \
            2>&1 | tee "$RESULTS/bench_validate.txt" | head -60 ;;
    hlsl_reference)  # HLSL validated with cupy beside Vulkan: the GPU test at SIZE, then validate's time host vs GPU
        PEAK_TEST_HLSL_SIZE=${SIZE:-4096} timeout 400 python3 -m pytest -q -s -p no:cacheprovider -rs \
            tests/test_hlsl_gpu_reference.py 2>&1 | tee "$RESULTS/pytest_hlsl_reference.txt"
        timeout 300 python3 tools/bench_validate.py --backend hlsl --size "${SIZE:-4096}" --reference both \
            --no-profile examples/matmul/hlsl/register_blocked.hlsl 2>&1 | tee "$RESULTS/bench_validate_hlsl.txt" ;;
    plain)  # the f32 examples alone: round trips and phases without faults or apply in the way
        bench cuda_plain --backend cuda --dtype f32 --size "${SIZE:-4096}"
        python3 tools/timelines.py --data-dir /tmp/peak-bench-cuda_plain | tee -a "$RESULTS/bench_cuda_plain.txt" ;;
    cuda)  # f32 with the fault cases and a sampled apply round trip
        bench cuda_f32 --backend cuda --dtype f32 --size "${SIZE:-4096}" --faults \
            --apply register-blocking-2d=examples/matmul/cuda/regblock_2d.cu ;;
    cuda16)  # the tensor-core examples; f16 also applies tensor-cores with the WMMA kernel as the sampled reply
        bench cuda_f16 --backend cuda --dtype f16 --size "${SIZE:-4096}" \
            --apply tensor-cores=examples/matmul/cuda/f16/wmma_tiled.cu
        bench cuda_bf16 --backend cuda --dtype bf16 --size "${SIZE:-4096}" ;;
    hlsl)
        PEAK_MCP_VK_FENCE_TIMEOUT_S=5 bench hlsl --backend hlsl --size "${SIZE:-4096}" --faults \
            --apply hlsl-groupshared-tiling=examples/matmul/hlsl/tiled_groupshared.hlsl ;;
    hlsl_ladder)  # issue 22: the HLSL f32 ladder through MCP on the device's Vulkan driver, each step applied and
        # its BK tuned, at each of LADDER_SIZES; % of the FP32 peak per step (LADDER_FROM skips the lower steps)
        for size in ${LADDER_SIZES:-4096}; do
            echo "== hlsl ladder $size"
            PEAK_MCP_VK_FENCE_TIMEOUT_S=10 timeout "${LADDER_TIMEOUT:-280}" python3 tools/tune_ladder.py --backend hlsl \
                --dtype f32 --size "$size" ${LADDER_FROM:+--from "$LADDER_FROM"} --data-dir "/tmp/peak-hlsl-ladder-$size" \
                --out "$RESULTS/hlsl_ladder_$size.json" --tune-budget "${TUNE_BUDGET:-40}" \
                2> "$RESULTS/hlsl_ladder_$size.log" | tee "$RESULTS/hlsl_ladder_$size.txt"
            echo "hlsl ladder $size rc=${PIPESTATUS[0]}"
        done ;;
    ladder)  # issue 11's tuned ladders at 4096^3 (f32 with the HIP twin of each tuned step, then bf16); the whole f32
        # ladder (six steps since issue 22) needs a call of its own: LADDER_DTYPES=f32
        for dtype in ${LADDER_DTYPES:-f32 bf16}; do
            echo "== ladder $dtype"
            timeout "${LADDER_TIMEOUT:-$([ "$dtype" = f32 ] && echo 540 || echo 300)}" python3 tools/tune_ladder.py --dtype "$dtype" --size "${SIZE:-4096}" \
                --data-dir "/tmp/peak-ladder-$dtype" --out "$RESULTS/ladder_$dtype.json" \
                --landscape "$RESULTS/landscape_$dtype.json" --tune-budget "${TUNE_BUDGET:-120}" \
                $([ "$dtype" = f32 ] && echo --hip-twin) \
                2> "$RESULTS/ladder_$dtype.log" | tee "$RESULTS/ladder_$dtype.txt"
        done ;;
    f32ladder)  # issue 22: the f32 ladder's upper steps (double buffering, cp.async, warp tiling on it, 3xTF32), each
        # applied through MCP and tuned, at each of LADDER_SIZES; under 3 minutes a size on an H100 (one run each)
        for size in ${LADDER_SIZES:-4096 8192}; do
            echo "== f32 ladder $size"
            timeout "${LADDER_TIMEOUT:-280}" python3 tools/tune_ladder.py --dtype f32 --size "$size" \
                --from "${LADDER_FROM:-double-buffering}" --data-dir "/tmp/peak-f32ladder-$size" \
                --out "$RESULTS/f32ladder_$size.json" --tune-budget "${TUNE_BUDGET:-40}" \
                2> "$RESULTS/f32ladder_$size.log" | tee "$RESULTS/f32ladder_$size.txt"
            echo "f32 ladder $size rc=${PIPESTATUS[0]}"
        done ;;
    problems)  # the row problems' shipped kernels through MCP at 8192 x 8192 (PROBLEMS, DTYPES, TUNE override)
        timeout "${PROBLEMS_TIMEOUT:-400}" python3 tools/bench_problems.py --problems ${PROBLEMS:-softmax rmsnorm} \
            --dtypes ${DTYPES:-f32 bf16} --tune "${TUNE:-0}" --out "$RESULTS/problems.json" \
            2> "$RESULTS/problems.log" | tee "$RESULTS/problems.txt" ;;
    attention)  # issue 34's yardstick: the Hopper attention step (as v0 and resubmitted) at 4x32x4096x128, every
        # torch path SDPA offers timed beside it (the fastest is the yardstick), its CUDA kernels named
        timeout "${ATTN_TIMEOUT:-300}" python3 tools/bench_problems.py --problems attention attention_causal \
            --dtypes ${ATTN_DTYPES:-bf16} --v0 5_hopper_wgmma --kernels 5_hopper_wgmma --torch-kernels \
            --data-dir /tmp/peak-attention --out "$RESULTS/attention.json" 2> "$RESULTS/attention.log" \
            | tee "$RESULTS/attention.txt" ;;
    kbround)  # issue 35: submit_kernel's round trip on KernelBench files at the issue's sizes (carry build/kernelbench,
        # from PROBLEMS_LIST=tools/kernelbench_batch/agent33.txt tools/kernelbench_batch.sh prepare): the agent's kernel
        # as v0, then two sources that differ from it by a comment (compiled anew; the session's input sets and
        # references kept from the first). One data dir for all, after a small warm-up session, as a running server's.
        kbdata=/tmp/peak-kbround
        timeout 200 python3 tools/bench_problems.py --problem-dir build/kernelbench \
            --problems kb_4_matrix_vector_multiplication --dtypes f32 --sizes M=256,K=4096 \
            --v0 tools/kernelbench_batch/agent33/kb_4_matrix_vector_multiplication.cu --data-dir "$kbdata" \
            > "$RESULTS/kbround_warmup.txt" 2>&1
        for entry in kb_89_cumsum:BATCH_SIZE=4096 kb_4_matrix_vector_multiplication:M=2048,K=65536 kb_40_layernorm: \
                kb_19_relu:; do
            name=${entry%%:*} sizes=${entry#*:}
            kernel=tools/kernelbench_batch/agent33/$name.cu
            for i in 1 2; do { cat "$kernel"; echo "// variant $i"; } > "/tmp/${name}_v$i.cu"; done
            timeout "${KB_TIMEOUT:-150}" python3 tools/bench_problems.py --problem-dir build/kernelbench \
                --problems "$name" --dtypes f32 ${sizes:+--sizes "$sizes"} --v0 "$kernel" \
                --kernels "/tmp/${name}_v1.cu" "/tmp/${name}_v2.cu" --data-dir "$kbdata" \
                --out "$RESULTS/kbround_$name.json" 2> "$RESULTS/kbround_$name.log" | tee "$RESULTS/kbround_$name.txt"
            python3 tools/timelines.py --data-dir "$kbdata" --last 3 --steps 14 | tee -a "$RESULTS/kbround_$name.txt"
        done ;;
    audit)  # the benchmark's per-launch audit: its GPU test, and its time at 6.4M and 134M elements
        python3 -m pytest -q -p no:cacheprovider tests/test_wrong_count_gpu.py 2>&1 | tee "$RESULTS/audit.txt"
        python3 tools/bench_audit.py 2>&1 | tee -a "$RESULTS/audit.txt" ;;
    convround)  # issue 35: the Hopper conv2d step's round trip on the ResNet-50 3x3 layer (step 5 as v0), twice
        timeout 300 python3 tools/bench_problems.py --problems conv2d --dtypes f16 --v0 5_mma_swizzled \
            --kernels 6_hopper_tma_wgmma 6_hopper_tma_wgmma --sizes N=32,H=56,W=56,C=64,K=64,R=3,S=3,STRIDE=1,PAD=1,DIL=1 \
            --data-dir /tmp/peak-convround --out "$RESULTS/convround.json" 2> "$RESULTS/convround.log" \
            | tee "$RESULTS/convround.txt"
        python3 tools/timelines.py --data-dir /tmp/peak-convround | tee -a "$RESULTS/convround.txt" ;;
    conv2d)  # conv2d's ladder on a ResNet-50 3x3 layer and a 1x1 layer, % of cuDNN through torch, cuDNN's kernels named
        for layer in N=32,H=56,W=56,C=64,K=64,R=3,S=3,STRIDE=1,PAD=1,DIL=1 N=32,H=56,W=56,C=256,K=64,R=1,S=1,STRIDE=1,PAD=0,DIL=1; do
            tag=$(echo "$layer" | cut -d, -f4,6 | tr -d '=,')
            timeout "${CONV_TIMEOUT:-240}" python3 tools/bench_problems.py --problems conv2d --dtypes ${DTYPES:-f16 f32} \
                --sizes "$layer" --torch-kernels --data-dir "/tmp/peak-conv-$tag" --out "$RESULTS/conv2d_$tag.json" \
                2> "$RESULTS/conv2d_$tag.log" | tee "$RESULTS/conv2d_$tag.txt"
        done ;;
    kernelbench)  # a KernelBench-format file (tests/data/kernelbench/softmax.py, as kb_softmax) as a problem, and the
        # online-softmax example in its ABI (its size symbols are the module's batch_size and dim) validated and timed
        kb=$(mktemp -d /tmp/peak-kb.XXXX)
        cp tests/data/kernelbench/softmax.py "$kb/kb_softmax.py"
        sed -e 's/\bROWS\b/BATCH_SIZE/g; s/\bCOLS\b/DIM/g' examples/softmax/cuda/4_online_registers.cu > "$kb/online.cu"
        timeout "${KB_TIMEOUT:-200}" python3 tools/bench_problems.py --problem-dir "$kb" --problems kb_softmax \
            --dtypes f32 --sizes BATCH_SIZE=8192,DIM=8192 --kernels "$kb/online.cu" --out "$RESULTS/kernelbench.json" \
            --data-dir /tmp/peak-bench-kb 2> "$RESULTS/kernelbench.log" | tee "$RESULTS/kernelbench.txt" ;;
    false_failures)  # the problem tolerances on this device: shipped correct kernels at every sampled size
        timeout "${FALSE_TIMEOUT:-240}" python3 tools/false_failures.py --backend cuda --examples ${FALSE_SIZES:+--sizes "$FALSE_SIZES"} \
            ${FALSE_ARGS:-} --out "$RESULTS/false_failures.json" 2> "$RESULTS/false_failures.log" | tee "$RESULTS/false_failures.txt" ;;
    false_failures_kernel)  # the same with the naive kernel as the reference (problems without a Python reference)
        timeout "${FALSE_TIMEOUT:-240}" python3 tools/false_failures.py --backend cuda --examples --against-kernel \
            ${FALSE_SIZES:+--sizes "$FALSE_SIZES"} --out "$RESULTS/false_failures_kernel.json" \
            2> "$RESULTS/false_failures_kernel.log" | tee "$RESULTS/false_failures_kernel.txt" ;;
    lavapipe)  # the same shaders on Mesa's CPU Vulkan, at a size a CPU finishes in minutes
        [ -f /tmp/vk/lvp_icd.json ] || { echo "lavapipe needs .vk carried"; continue; }
        VK_DRIVER_FILES=/tmp/vk/lvp_icd.json BENCH_TIMEOUT=400 bench lavapipe --backend hlsl \
            --size "${LAVAPIPE_SIZE:-1024}" ;;
    esac
    # after every part, not only at exit: a call cut by the device's limit (SIGKILL, no trap) keeps the parts done
    tar czf "$OUT/results.tgz" -C "$RESULTS" .
done
