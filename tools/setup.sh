#!/usr/bin/env bash
# Install peak-mcp and everything it needs on a fresh Debian/Ubuntu machine into ./.venv.
# System packages (Vulkan loader, lavapipe, glslang) come from apt when we are root or have sudo.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=$(grep -v '^#' .ci/apt-packages.txt | xargs)
missing=$(for p in $packages; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done | xargs)
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ]; then apt_get="apt-get"; elif command -v sudo >/dev/null; then apt_get="sudo apt-get"; fi
    if [ -n "${apt_get:-}" ]; then
        export DEBIAN_FRONTEND=noninteractive
        # A fresh machine often has apt busy (unattended-upgrades, cloud-init): wait for its locks instead of
        # failing. DPkg::Lock::Timeout covers dpkg's locks; `update`'s lists lock is waited for here, up to 10 min.
        wait_lock=(-o DPkg::Lock::Timeout=600)
        log=$(mktemp)
        trap 'rm -f "$log"' EXIT
        for try in $(seq 60); do
            if $apt_get "${wait_lock[@]}" update -qq 2>"$log"; then cat "$log" >&2; break; fi
            if ! grep -qi 'lock' "$log" || [ "$try" = 60 ]; then cat "$log" >&2; exit 1; fi
            echo "setup.sh: apt is busy (another apt or dpkg holds its lock); waiting ($try of 60)" >&2
            sleep 10
        done
        $apt_get "${wait_lock[@]}" install -y -qq --no-install-recommends $missing
    else
        echo "warning: cannot install $missing (not root, no sudo); the HLSL backend will report what is missing" >&2
    fi
fi
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch (the `torch` extra) is for KernelBench files, problem files' torch references and the torch yardsticks: real
# users' problems need it, so it is installed by default, from the configured index (2-3 minutes).
# PEAK_MCP_TORCH=none leaves it out (KernelBench files are then refused with a reason); =cpu takes the CPU wheel from
# download.pytorch.org (about 200 MB) where the index's CUDA build is unwanted.
case "${PEAK_MCP_TORCH:-index}" in
    none) .venv/bin/python -m pip install -q -e ".[test]" ;;
    cpu)
        .venv/bin/python -m pip install -q -e ".[test]"
        .venv/bin/python -m pip install -q --retries 0 --timeout 15 "torch>=2.4" --index-url https://download.pytorch.org/whl/cpu
        ;;
    *)
        .venv/bin/python -m pip install -q -e ".[test,torch]"
        # torch's CUDA build pins NVRTC to its own 13.0; the kernels here are built by the newest 13.x NVRTC, whose
        # ptxas keeps the shipped conv ladder free of spills (tests/test_conv2d checks it; 13.0 spills 16 bytes).
        # torch does not load NVRTC for what it does here (KernelBench references, yardsticks), so the newer one
        # goes back in; pip reports torch's pin as broken, which is expected.
        .venv/bin/python -m pip install -q --upgrade "nvidia-cuda-nvrtc>=13,<14"
        ;;
esac
