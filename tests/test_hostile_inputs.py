"""Hostile sources through a real MCP client, for every backend that compiles here (CI: CUDA and HIP compile-only,
HLSL on lavapipe). Each probe is a way an agent tried to reach a host file or exhaust the host: the version is a
compile error that names what was refused, no byte of the file comes back, and the reply for an existing file is
the reply for a missing one (existence does not leak either). Grows with every backend and problem."""

from __future__ import annotations

import pytest

from peak_mcp.problems.matmul import Matmul
from tests.conftest import has_device, probe

pytestmark = pytest.mark.anyio
SMALL = {"M": 16, "N": 16, "K": 16}
SECRET = "31337"
BACKENDS = [b for b in ("cuda", "hip", "hlsl")
            if probe().get(b, {}).get("compiler", {}).get("available") and (b != "hlsl" or has_device("hlsl"))]

# (name, lines placed after the annotation with FILE for the target, what the refusal names)
PROBES = [
    ("nbsp_between_hash_and_include", '#\u00a0include "FILE"', "U+00A0"),
    ("nul_between_hash_and_include", '#\x00include "FILE"', "U+0000"),
    ("nbsp_in_static_assert", 'static_assert(0 + \n#\u00a0include "FILE"\n == 0, "x");', "U+00A0"),
    ("pasted_has_include", '#define CAT(a, b) a##b\n#if CAT(__has_, include)("FILE")\n#error exists\n#endif',
     "token pasting"),
    ("pasted_pragma", '#define CAT(a, b) a##b\nCAT(_Pra, gma)("include_alias(\\"x.h\\", \\"FILE\\")")',
     "token pasting"),
    ("digraph_pasting", '#define CAT(a, b) a%:%:b\n#if CAT(__has_, include)("FILE")\n#endif', "token pasting"),
    ("ucn_has_include", '#if \\u005F_has_include("FILE")\n#error exists\n#endif', "universal character name"),
    ("trigraph_splice", '#inc??/\nlude "FILE"', "trigraph"),
    ("form_feed_after_hash", '#\finclude "FILE"', "only spaces and tabs"),
    ("zero_width_space", '#include\u200b "FILE"', "U+200B"),
    ("bidi_override", '// \u202e "FILE"', "U+202E"),
]


def _source(backend: str, lines: str) -> str:
    head, _, rest = Matmul().naive_kernel(backend, "f32").partition("\n")
    return f"{head}\n{lines}\n{rest}"


async def _session(client, backend: str) -> str:
    started = await client.call_tool("start_session", {"backend": backend, "sizes": SMALL})
    assert not started.is_error, started.content[0].text
    return started.structured_content["session_id"]


async def _submit(client, sid: str, source: str) -> tuple[dict, str]:
    result = await client.call_tool("submit_kernel", {"session_id": sid, "source": source})
    assert not result.is_error, result.content[0].text
    return result.structured_content, result.content[0].text


@pytest.mark.parametrize("backend", BACKENDS)
async def test_every_probe_is_refused_and_existence_does_not_leak(make_client, tmp_path, backend: str) -> None:
    existing = tmp_path / "private" / "secret.h"
    existing.parent.mkdir()
    existing.write_text(f"{SECRET}\n")
    missing = tmp_path / "private" / "missing.h"
    async with make_client() as (client, _):
        sid = await _session(client, backend)
        for name, lines, named in PROBES:
            replies = []
            for target in (existing, missing):
                report, text = await _submit(client, sid, _source(backend, lines.replace("FILE", str(target))))
                assert report["status"] == "compile_error", (name, report)
                assert named in report["message"], (name, report["message"])
                assert SECRET not in text + str(report), name
                replies.append(report["message"].replace(str(target), "FILE"))
            assert replies[0] == replies[1], f"{name}: an existing file is answered differently from a missing one"


async def test_a_lone_surrogate_is_refused_as_no_text_and_nothing_is_recorded(make_client) -> None:
    async with make_client() as (client, _):
        sid = await _session(client, BACKENDS[0])
        source = _source(BACKENDS[0], 'static const char* s = "\ud800";')
        result = await client.call_tool("submit_kernel", {"session_id": sid, "source": source})
        assert result.is_error and "U+D800" in result.content[0].text and "line 2" in result.content[0].text
        history = await client.call_tool("history", {"session_id": sid})
        assert [row["version"] for row in history.structured_content["rows"]] == [0]


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "hlsl"])
async def test_an_entry_point_under_if_0_is_a_compile_error(make_client, backend: str) -> None:
    naive = Matmul().naive_kernel(backend, "f32")
    head, _, body = naive.partition("\n")
    hidden = f'{head}\nextern "C" __global__ void other(int x) {{}}\n#if 0\n{body}\n#endif\n'
    async with make_client() as (client, _):
        sid = await _session(client, backend)
        report, _ = await _submit(client, sid, hidden)
        assert report["status"] == "compile_error", report
        assert "not a kernel of the compiled module" in report["message"], report["message"]


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b in ("cuda", "hlsl")])
async def test_a_macro_bomb_is_stopped_by_the_compile_limits_and_the_server_goes_on(make_client, settings,
                                                                                   backend: str) -> None:
    from tests.test_sandbox import bomb

    settings.compile_memory_mb, settings.compile_cpu_s, settings.compile_wall_s = 768, 4, 20
    async with make_client() as (client, _):
        sid = await _session(client, backend)
        report, _ = await _submit(client, sid, _source(backend, bomb()))
        assert report["status"] == "compile_error" and report["failure"] == "resources", report
        assert "limit" in report["message"] and "never ran" in report["message"]
        again, _ = await _submit(client, sid, Matmul().naive_kernel(backend, "f32"))
        assert again["status"] != "compile_error", again
