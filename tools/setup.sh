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
        $apt_get update -qq && $apt_get install -y -qq --no-install-recommends $missing
    else
        echo "warning: cannot install $missing (not root, no sudo); the HLSL backend will report what is missing" >&2
    fi
fi
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
