#!/usr/bin/env bash
# One turn of `peak-mcp agent` on a lent GPU machine (no network there, so an LLM outside answers between calls):
# resume the run saved in $AGENT_DIR (carried: the exchange folder ex/, the data dir data/, report/) or start one,
# run until the next model reply is missing (exit 3) or the run ends, and pack $AGENT_DIR into $OUT/agent.tgz.
# Between calls: unpack agent.tgz into $AGENT_DIR here, answer ex/request-<n>.json with ex/reply-<n>.txt, carry it.
#   AGENT_DIR=build/agentrun PROBLEM=kb_40_layernorm PEAK_MCP_PROBLEMS=build/kernelbench tools/agent_turn.sh
# (wheels installed first, as tools/gpu_suite.sh does: PARTS=none tools/gpu_suite.sh)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
A=$(mkdir -p "${AGENT_DIR:?}" && cd "$AGENT_DIR" && pwd)
export PYTHONPATH=/tmp/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}
[ -n "${PEAK_MCP_PROBLEMS:-}" ] && export PEAK_MCP_PROBLEMS=$(cd "$PEAK_MCP_PROBLEMS" && pwd)
cd "$A"  # the state names its folders relative to here
trap 'tar czf "${OUT:-/tmp}/agent.tgz" --exclude=data/cache/cupy -C "$A" .' EXIT
if [ -f ex/state.json ]; then
    timeout "${AGENT_TIMEOUT:-500}" python3 -m peak_mcp agent --resume ex/state.json --data-dir data
else
    timeout "${AGENT_TIMEOUT:-500}" python3 -m peak_mcp agent --problem "${PROBLEM:?}" --backend "${BACKEND:-cuda}" \
        --dtype "${DTYPE:-f32}" ${SIZES:+--sizes "$SIZES"} --model exchange:ex --exchange-wait 0 \
        --max-versions "${MAX_VERSIONS:-6}" --max-minutes "${MAX_MINUTES:-60}" --data-dir data --report-dir report
fi
echo "agent rc=$?"
