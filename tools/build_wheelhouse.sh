#!/usr/bin/env bash
# Download the wheels the lent GPU machine lacks (Python 3.12, x86-64, no network there) into .whl/.
# Its image already has numpy, matplotlib, pyyaml, anyio, cuda-python, cuda-core, cupy and the NVIDIA wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_34_x86_64
           --platform any)
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
    -d .whl/all "mcp>=2.3,<3" pydantic pydantic-settings structlog "vulkan>=1.3.275" cffi "optuna>=4" \
    "nvidia-cuda-nvdisasm>=13,<14" "nvidia-cuda-cccl>=13,<14" "pydantic-ai-slim[mcp]==2.68.0"  # the last: peak-mcp agent
# Keep what the image lacks; drop what it has (two versions of one package stop the install there).
cd .whl
for wheel in all/*.whl; do
    name=$(basename "$wheel" | cut -d- -f1 | tr '[:upper:]' '[:lower:]' | tr '_' '-')
    case "$name" in
        numpy|anyio|idna|certifi|h11|httpcore|httpx|typing-extensions|click|pyyaml|attrs|sniffio) ;;
        *) mv "$wheel" . ;;
    esac
done
rm -rf all
ls -1 | sed 's/-py.*//' | tr '\n' ' '; echo; du -sh .
