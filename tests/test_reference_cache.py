"""Issue 35: a session's input sets and their references are computed once and kept in the worker
(evaluation/reference_cache.py). A problem file's reference (torch, float64, across a socket) was paid again by every
submission of a session for the same inputs."""

from __future__ import annotations

import numpy as np
import pytest

from peak_mcp.evaluation.reference_cache import ReferenceCache, fresh_trial, identity
from peak_mcp.loop.context import session_seed
from peak_mcp.problems.base import Reference
from peak_mcp.problems.shipped import worker_problem
from tests.test_define_problem import KERNEL, NEGATE, VULKAN, call


def test_kept_sets_come_back_as_copies_and_only_for_their_own_key() -> None:
    cache = ReferenceCache()
    matmul = worker_problem("matmul", None)
    key = cache.key(matmul, np, "f32", {"M": 8, "N": 8, "K": 8}, 7, False)
    inputs = {"A": np.arange(4, dtype=np.float32)}
    refs = {"C": Reference(values=np.arange(4.0), indices=None, scale=np.ones(4))}
    assert cache.get(key, np) is None
    cache.put(key, np, inputs, refs)
    inputs["A"][0] = 99  # the caller's arrays change (the timed launches' audit does): the kept ones do not
    refs["C"].values[0] = 99
    kept_inputs, kept_refs = cache.get(key, np)
    assert kept_inputs["A"][0] == 0 and kept_refs["C"].values[0] == 0
    kept_inputs["A"][1] = 55  # nor do they change through a copy handed out
    assert cache.get(key, np)[0]["A"][1] == 1
    for other in (cache.key(matmul, np, "f32", {"M": 8, "N": 8, "K": 9}, 7, False),
                  cache.key(matmul, np, "f32", {"M": 8, "N": 8, "K": 8}, 8, False),
                  cache.key(matmul, np, "f32", {"M": 8, "N": 8, "K": 8}, 7, True),
                  cache.key(matmul, np, "f16", {"M": 8, "N": 8, "K": 8}, 7, False)):
        assert cache.get(other, np) is None
    assert identity(matmul) == ("builtin", "matmul")
    # one trial of a small output's validation is drawn fresh; a large output's may all be kept
    assert fresh_trial(matmul, "f32", {"M": 64, "N": 64, "K": 64}, 3) == 1
    assert fresh_trial(matmul, "f32", {"M": 64, "N": 64, "K": 64}, 1) == 0
    assert fresh_trial(matmul, "f32", {"M": 4096, "N": 4096, "K": 64}, 3) is None
    assert session_seed("abc") == session_seed("abc") != session_seed("abd")


@VULKAN
@pytest.mark.anyio
async def test_a_second_submission_reuses_the_sets_and_a_wrong_kernel_still_fails_on_them(make_client) -> None:
    async with make_client() as (client, service):
        await call(client, "define_problem", {"source": NEGATE})
        session = await call(client, "start_session", {"problem": "negate", "backend": "hlsl", "sizes": {"N": 1000}})
        sid = session["session_id"]
        first = await call(client, "submit_kernel", {"session_id": sid, "source": KERNEL.replace("BODY", "-x[id.x]")})
        second = await call(client, "submit_kernel", {"session_id": sid,
                                                      "source": KERNEL.replace("BODY", "-1.0 * x[id.x]")})
        assert first["status"] == second["status"] == "benchmarked", second["message"]
        steps = [[line for _, line in service.store.version(sid, n).timeline.steps] for n in (0, 1)]
        assert any("from the problem file" in line for line in steps[0])  # computed by the file's code once
        # kept, but for one trial drawn fresh: this output is small (1,000 elements), and a session's fixed inputs
        # would let an agent learn its values from wrong-result messages
        # (distinct lines: a step that lasts over a second is said again by the heartbeat on a loaded machine)
        computed = {line for line in steps[1] if line.startswith("validate") and "from the problem file" in line}
        assert len(computed) == 1 and "trial 2/3" in next(iter(computed)), steps[1]
        assert len({line for line in steps[1] if "kept from an earlier submission" in line}) == 2
        wrong = await call(client, "submit_kernel", {"session_id": sid, "source": KERNEL.replace("BODY", "x[id.x]")})
        assert wrong["failure"] == "wrong_result"
        other = await call(client, "start_session", {"problem": "negate", "backend": "hlsl", "sizes": {"N": 1000}})
        third = await call(client, "submit_kernel", {"session_id": other["session_id"],
                                                     "source": KERNEL.replace("BODY", "-x[id.x]")})
        steps = [line for _, line in service.store.version(other["session_id"], third["version"]).timeline.steps]
        assert any("from the problem file" in line for line in steps)  # another session: its own inputs
