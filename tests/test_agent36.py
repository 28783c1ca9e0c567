"""`peak-mcp agent` (issue 36): a pydantic-ai model drives one session of the real server (a stdio child on
lavapipe, HLSL matmul at small sizes) to its budget. The models: a FunctionModel policy that reads the server's
answers, the folder exchange answered by a thread (then replayed from the run's recording), and the `openai:`
provider path against a stub chat-completions server on loopback. Nothing reaches the network."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from peak_mcp.research.agent_budget import Budget, Tracker
from peak_mcp.research.agent_codec import parts_of, reply_text
from peak_mcp.research.agent_models import Recording, make_model
from peak_mcp.research.agent_run import AgentPlan, run_agent, stdio_toolset
from peak_mcp.research.agent_state import AgentState, dump_messages, save
from peak_mcp.research.exchanges import read_exchanges
from tests.conftest import EXAMPLES, has_device, skip_reason
from tests.test_cli import cli

TILED = (EXAMPLES / "hlsl" / "tiled_groupshared.hlsl").read_text()
SIZES = "M=40,N=24,K=20"
TILING = "hlsl-groupshared-tiling"


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stdio child inherits this environment: short timing, no validation layer (seconds per version)."""
    monkeypatch.setenv("PEAK_MCP_BENCH_SECONDS", "0.2")
    monkeypatch.setenv("PEAK_MCP_SANITIZER", "0")


def test_reply_codec_and_model_strings(tmp_path: Path) -> None:
    calls = parts_of('{"tool_calls": [{"name": "history", "args": {"chart": false}}], "text": "looking"}')
    assert [type(p).__name__ for p in calls] == ["TextPart", "ToolCallPart"]
    assert (calls[1].tool_name, calls[1].args) == ("history", {"chart": False})
    assert json.loads(reply_text(ModelResponse(parts=calls))) == {
        "tool_calls": [{"name": "history", "args": {"chart": False}}], "text": "looking"}
    assert [p.content for p in parts_of("{not json, just text}")] == ["{not json, just text}"]
    assert reply_text(ModelResponse(parts=[TextPart("done")])) == "done"
    assert isinstance(make_model("test"), TestModel)
    assert make_model(f"exchange:{tmp_path}").model_name == f"exchange:{tmp_path}"
    with pytest.raises(ValueError, match=r"recorded exchanges\.jsonl"):
        make_model(f"replay:{tmp_path / 'none.jsonl'}")


def test_stop_rules_read_the_servers_history() -> None:
    """Versions past those at the start; the best version's share of the roofline, else of the vendor library;
    minutes since the run began (the session's start included)."""
    def history(*rows: dict[str, Any], best: int = 0) -> dict[str, Any]:
        return {"best": best, "rows": [{"version": 0, "median_ms": 2.0, "pct_of_vendor": 10.0}, *rows]}

    tracker = Tracker(Budget(max_versions=2, target_percent=50), history())
    assert tracker.stop_reason() is None
    new = tracker.observe(history({"version": 1, "status": "failed"}))
    assert [r["version"] for r in new] == [1] and tracker.made == 1 and tracker.stop_reason() is None
    tracker.observe(history({"version": 1}, {"version": 2, "pct_of_vendor": 60.0, "pct_of_roofline": 40.0}, best=2))
    assert tracker.stop_reason().startswith("version budget spent: 2 version(s)")
    tracker.budget = Budget(max_versions=5, target_percent=50)  # roofline first: 40% is short of it
    assert tracker.stop_reason() is None
    tracker.observe(history({"version": 1}, {"version": 2, "pct_of_vendor": 60.0}, best=2))  # no roofline
    assert tracker.stop_reason() == "target reached: best v2 at 60.0% vendor (--target-percent 50)"
    late = Tracker(Budget(max_minutes=1), history(), started=time.monotonic() - 61)
    assert late.stop_reason().startswith("time budget spent: 1.0 min")


def _tool_answer(messages: list[ModelMessage], tool: str) -> Any:
    return next(p.content for m in reversed(messages) for p in m.parts
                if p.part_kind == "tool-return" and p.tool_name == tool)


@pytest.mark.usefixtures("quick")
@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
def test_function_model_runs_a_session_to_its_version_budget(tmp_path: Path) -> None:
    """suggest_next, a catalog transformation whose kernel the server asks the same model for by sampling
    (apply_transformation), then two kernels written by the model in one response with one version of the budget
    left: the first is made, the second refused, and the run stops although the policy would go on."""
    seen: dict[str, Any] = {"sampled": 0, "turns": 0}

    def policy(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not info.function_tools:  # the server's sampling request: the kernel, fenced
            seen["sampled"] += 1
            return ModelResponse(parts=[TextPart(f"Tiled.\n\n```hlsl\n{TILED}```\n")])
        seen["turns"] += 1
        seen["tools"] = {t.name for t in info.function_tools}
        if seen["turns"] == 1:
            seen["instructions"] = info.instructions
            return ModelResponse(parts=[ToolCallPart("suggest_next", {"session_id": "not-mine"})])
        if seen["turns"] == 2:
            seen["suggested"] = _tool_answer(messages, "suggest_next")
            return ModelResponse(parts=[ToolCallPart("apply_transformation", {
                "transformation": TILING, "version": 0, "max_attempts": 1})])
        if seen["turns"] == 3:  # two kernels at once, one version of budget left: the second is refused
            seen["applied"] = _tool_answer(messages, "apply_transformation")
            return ModelResponse(parts=[ToolCallPart("submit_kernel", {"source": TILED, "parent": 0}),
                                        ToolCallPart("submit_kernel", {"source": TILED, "parent": 1})])
        return ModelResponse(parts=[ToolCallPart("submit_kernel", {"source": TILED})])  # past the budget

    plan = AgentPlan(backend="hlsl", sizes={"M": 40, "N": 24, "K": 20}, model="function",
                     budget=Budget(max_versions=2, max_minutes=5))
    recording = tmp_path / "exchanges.jsonl"
    report = anyio.run(run_agent, plan, Recording(FunctionModel(policy), recording),
                       stdio_toolset(tmp_path / "data"))

    assert report.stop_reason == "version budget spent: 2 version(s) made (--max-versions 2)"
    assert (seen["turns"], seen["sampled"], report.versions_made, report.model_requests) == (3, 1, 2, 3)
    assert "start_session" not in seen["tools"] and {"submit_kernel", "apply_transformation"} <= seen["tools"]
    assert report.session_id in seen["instructions"] and "2 new versions" in seen["instructions"]
    assert seen["suggested"]["session_id"] == report.session_id  # the call was pinned to the run's session
    assert seen["applied"]["succeeded"] and seen["applied"]["result"] == 1
    assert [(t.tool, [v["version"] for v in t.versions], t.error) for t in report.tried[:2]] == [
        ("suggest_next", [], None), ("apply_transformation", [1], None)]
    submitted = sorted(report.tried[2:], key=lambda t: t.refused is not None)
    assert [(t.tool, [v["version"] for v in t.versions]) for t in submitted] == [
        ("submit_kernel", [2]), ("submit_kernel", [])]
    assert submitted[1].refused.startswith("version budget spent: 2 version(s)")
    assert submitted[0].args["source"] == f"<{len(TILED)} chars>"
    # the best is history's, its lineage runs from v0, and its speedup is against v0's time
    assert report.best is not None and report.lineage[0]["version"] == 0
    assert report.lineage[-1]["version"] == report.best["version"] and report.v0_ms and report.v0_ms > 0
    if report.best["version"]:
        assert report.best["speedup_vs_v0"] == pytest.approx(report.v0_ms / report.best["median_ms"], rel=0.02)
    text = report.markdown()
    assert "stopped: version budget spent" in text and "| 2 | apply_transformation |" in text
    assert "v2 benchmarked" in text and "refused: version budget spent" in text
    # every exchange was recorded, the sampling request among them (no tools offered there)
    exchanges = read_exchanges(recording)
    assert len(exchanges) == 4 and sum(not json.loads(line)["request"]["tools"]
                                       for line in recording.read_text().splitlines()) == 1


def _replier(folder: Path, replies: list[str], requests: list[dict[str, Any]], stop: threading.Event) -> None:
    """Answers request-<n>.json with the n-th reply, as a person would: written aside, then renamed."""
    for n, reply in enumerate(replies, start=1):
        request = folder / f"request-{n}.json"
        while not request.exists():
            if stop.wait(0.1):
                return
        requests.append(json.loads(request.read_text()))
        (folder / f".reply-{n}.part").write_text(reply)
        (folder / f".reply-{n}.part").rename(folder / f"reply-{n}.txt")


@pytest.mark.usefixtures("quick")
@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
def test_exchange_model_answered_by_files_then_replayed(tmp_path: Path, capsys) -> None:
    exchange, out = tmp_path / "exchange", tmp_path / "report"
    exchange.mkdir()
    requests: list[dict[str, Any]] = []
    stop = threading.Event()
    replier = threading.Thread(target=_replier, args=(exchange, [
        json.dumps({"tool_calls": [{"name": "history", "args": {}}]}), "Nothing to gain here; stopping."],
        requests, stop), daemon=True)
    replier.start()
    try:
        code, printed, err = cli("agent", "--backend", "hlsl", "--sizes", SIZES, "--model", f"exchange:{exchange}",
                                 "--max-versions", "3", "--report-dir", str(out), "--data-dir",
                                 str(tmp_path / "data"), capsys=capsys)
    finally:
        stop.set()
        replier.join(5)
    assert code == 0, err
    first, second = requests
    assert first["reply_file"] == "reply-1.txt" and "tool_calls" in first["reply_format"]
    assert {"submit_kernel", "history"} <= {t["name"] for t in first["tools"]}
    assert "start_session" not in {t["name"] for t in first["tools"]}
    session = json.loads((out / "agent-report.json").read_text())["session_id"]
    assert session in first["system_prompt"]
    answered = [m for m in second["messages"] if m["role"] == "tool"]
    assert answered and answered[0]["text"].startswith("history (call") and session in answered[0]["text"]
    assert "stopped: the model stopped by itself" in printed and "Nothing to gain here" in printed
    report = json.loads((out / "agent-report.json").read_text())
    assert (report["versions_made"], [t["tool"] for t in report["tried"]]) == (0, ["history"])
    assert report["best"]["version"] == 0 and (out / "agent-report.md").read_text() in printed

    # The recording replays: same calls, same last words, no one answering.
    code, printed, err = cli("agent", "--backend", "hlsl", "--sizes", SIZES, "--model",
                             f"replay:{out / 'exchanges.jsonl'}", "--data-dir", str(tmp_path / "data"),
                             capsys=capsys)
    assert code == 0, err
    assert "stopped: the model stopped by itself" in printed and "Nothing to gain here" in printed
    assert "| 1 | history |" in printed


class _StubOpenAI(BaseHTTPRequestHandler):
    """/v1/chat/completions with canned answers: first a call of `history`, then text."""

    bodies: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append({"path": self.path, **body})
        if len(type(self).bodies) == 1:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "history", "arguments": "{}"}}]}
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": "stub: the naive kernel stays."}, "stop"
        answer = json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()),
                             "model": body["model"], "choices": [{"index": 0, "message": message,
                                                                  "finish_reason": finish}],
                             "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.usefixtures("quick")
@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
def test_openai_provider_against_a_local_compatible_server(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "stub-key")
    _StubOpenAI.bodies = []
    stub = ThreadingHTTPServer(("127.0.0.1", 0), _StubOpenAI)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    try:
        code, printed, err = cli("agent", "--backend", "hlsl", "--sizes", SIZES, "--model", "openai:stub-model",
                                 "--base-url", f"http://127.0.0.1:{stub.server_port}/v1", "--max-versions", "2",
                                 "--data-dir", str(tmp_path / "data"), capsys=capsys)
    finally:
        stub.shutdown()
    assert code == 0, err
    first, second = _StubOpenAI.bodies
    assert first["path"] == "/v1/chat/completions" and first["model"] == "stub-model"
    offered = {t["function"]["name"] for t in first["tools"]}
    assert {"submit_kernel", "apply_transformation", "history"} <= offered and "start_session" not in offered
    tool_message = next(m for m in second["messages"] if m["role"] == "tool")
    assert tool_message["tool_call_id"] == "call_1" and '"rows"' in tool_message["content"]
    assert "stopped: the model stopped by itself" in printed and "stub: the naive kernel stays." in printed
    assert "| 1 | history |" in printed and "model: openai:stub-model" in printed


def test_agent_command_refuses_what_it_cannot_run(tmp_path: Path, capsys) -> None:
    code, _, err = cli("agent", "--model", "replay:" + str(tmp_path / "missing.jsonl"), capsys=capsys)
    assert code == 2 and "recorded exchanges.jsonl" in err
    code, _, err = cli("agent", "--model", "test", "--max-versions", "0", capsys=capsys)
    assert code == 2 and "max_versions" in err


@pytest.mark.usefixtures("quick")
@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
def test_agent_joins_a_running_http_server(tmp_path: Path, capsys) -> None:
    """--url: the session is made in the running server's data dir; `test` is pydantic-ai's TestModel."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = tmp_path / "served"
    server = subprocess.Popen([sys.executable, "-m", "peak_mcp", "serve", "--http", "--port", str(port),
                               "--data-dir", str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "the HTTP server did not start"
                time.sleep(0.2)
        code, printed, err = cli("agent", "--url", f"http://127.0.0.1:{port}/mcp", "--backend", "hlsl",
                                 "--sizes", SIZES, "--model", "test", "--data-dir", str(tmp_path / "unused"),
                                 capsys=capsys)
    finally:
        server.terminate()
        server.wait(30)
    assert code == 0, err
    assert "model: test" in printed and "| 1 | history |" in printed and "done (TestModel)" in printed
    session = re.search(r"session ([0-9a-f]+)", printed).group(1)
    code, listed, _ = cli("sessions", "--data-dir", str(data), capsys=capsys)
    assert code == 0 and listed.startswith(session)  # the session is the HTTP server's
    assert not (tmp_path / "unused").exists()  # no stdio child was started


@pytest.mark.usefixtures("quick")
@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
def test_turn_by_turn_run_stops_for_each_reply_and_resumes(tmp_path: Path, capsys) -> None:
    """--exchange-wait 0: each process runs until a reply is missing, saves the state and exits 3; --resume, in a
    new process with a new stdio server on the same data dir, answers the pending request from its reply file and
    goes on in the same session. The budget, the calls and the report span the parts; the recording replays."""
    exchange, out, data = tmp_path / "exchange", tmp_path / "report", tmp_path / "data"
    state_file = exchange / "state.json"

    def resume() -> tuple[int, str, str]:
        return cli("agent", "--resume", str(state_file), "--data-dir", str(data), capsys=capsys)

    def reply(n: int, text: str) -> None:
        (exchange / f".reply-{n}.part").write_text(text)
        (exchange / f".reply-{n}.part").rename(exchange / f"reply-{n}.txt")

    code, printed, err = cli("agent", "--backend", "hlsl", "--sizes", SIZES, "--model", f"exchange:{exchange}",
                             "--exchange-wait", "0", "--max-versions", "3", "--report-dir", str(out),
                             "--data-dir", str(data), capsys=capsys)
    assert code == 3, err
    assert f"waiting for {exchange / 'reply-1.txt'}" in printed and f"--resume {state_file}" in printed
    state = json.loads(state_file.read_text())
    session = state["session_id"]
    assert (state["pending"], state["requests"], state["tried"], state["parts"]) == (1, 0, [], 1)
    assert state["messages"][-1]["kind"] == "request" and not state["plan"]["sampling"]
    first = json.loads((exchange / "request-1.json").read_text())
    assert session in first["system_prompt"] and "returns the brief" in first["system_prompt"]

    # Part 2: the reply's kernel is submitted in the same session, then the run waits for request 2, not 3.
    reply(1, json.dumps({"tool_calls": [{"name": "submit_kernel", "args": {"source": TILED, "parent": 0}}]}))
    code, printed, err = resume()
    assert code == 3, err
    assert f"waiting for {exchange / 'reply-2.txt'}" in printed and f"session {session}: part 2, from request 1" in err
    state = json.loads(state_file.read_text())
    assert (state["session_id"], state["pending"], state["requests"], state["parts"]) == (session, 2, 1, 2)
    assert [(t["tool"], [v["version"] for v in t["versions"]]) for t in state["tried"]] == [("submit_kernel", [1])]
    assert sorted(p.name for p in exchange.glob("request-*.json")) == ["request-1.json", "request-2.json"]
    second = json.loads((exchange / "request-2.json").read_text())
    assert second["system_prompt"] == first["system_prompt"]  # the same instructions
    answered = [m["text"] for m in second["messages"] if m["role"] == "tool"]
    assert len(answered) == 1 and answered[0].startswith("submit_kernel (call")

    code, printed, _ = resume()  # no reply yet: no server is started, the state stays as it was
    assert (code, printed.strip()) == (3, f"still waiting for {exchange / 'reply-2.txt'}")
    assert json.loads(state_file.read_text()) == state

    # Part 3: a second kernel on the first; part 4: the last words end the run with the whole run's report.
    reply(2, json.dumps({"tool_calls": [{"name": "submit_kernel", "args": {"source": TILED, "parent": 1}}]}))
    code, printed, err = resume()
    assert code == 3 and f"waiting for {exchange / 'reply-3.txt'}" in printed, err
    at_three = json.loads(state_file.read_text())
    reply(3, "Tiled twice; nothing more to gain.")
    code, printed, err = resume()
    assert code == 0, err
    report = json.loads((out / "agent-report.json").read_text())
    assert (report["session_id"], report["parts"], report["versions_made"], report["model_requests"]) == (
        session, 4, 2, 3)
    assert [(t["tool"], [v["version"] for v in t["versions"]]) for t in report["tried"]] == [
        ("submit_kernel", [1]), ("submit_kernel", [2])]
    assert report["stop_reason"] == "the model stopped by itself" and report["final_text"].startswith("Tiled twice")
    assert "in 4 parts" in printed and "| 2 | submit_kernel |" in printed and "Tiled twice" in printed
    assert report["wall_s"] >= sum(t["seconds"] for t in report["tried"])
    assert json.loads(state_file.read_text())["done"] == "the model stopped by itself"
    code, _, err = resume()
    assert code == 2 and "that run has ended" in err
    code, listed, _ = cli("sessions", "--data-dir", str(data), capsys=capsys)
    assert code == 0 and listed.count("\n") == 1 and listed.startswith(session)  # one session, four servers

    # The recording spans the parts: request 1 to 3 in order, and it replays in one process.
    assert [e.cell.repeat for e in read_exchanges(out / "exchanges.jsonl")] == [1, 2, 3]
    code, printed, err = cli("agent", "--backend", "hlsl", "--sizes", SIZES, "--model",
                             f"replay:{out / 'exchanges.jsonl'}", "--no-sampling", "--data-dir",
                             str(tmp_path / "replayed"), capsys=capsys)
    assert code == 0, err
    assert "2 version(s) made, 3 model request(s)" in printed and "Tiled twice" in printed

    # The budget spans the parts: the state at request 3 (2 requests answered, minutes used) resumed under a
    # request limit of 2, or with its time used raised to the limit, ends before request 3 is sent.
    def ended(name: str, state: dict[str, Any]) -> str:
        (tmp_path / name).write_text(json.dumps(state))
        code, _, err = cli("agent", "--resume", str(tmp_path / name), "--data-dir", str(data), capsys=capsys)
        assert code == 0, err
        return json.loads((out / "agent-report.json").read_text())["stop_reason"]

    lines = len((out / "exchanges.jsonl").read_text().splitlines())
    assert ended("requests.json", {**at_three, "plan": {**at_three["plan"], "max_requests": 2}}).startswith(
        "request limit: The next request would exceed the request_limit of 2")
    assert ended("minutes.json", {**at_three, "seconds": 3600.0}).startswith("time budget spent: 60.")
    assert len((out / "exchanges.jsonl").read_text().splitlines()) == lines  # no request was sent


def test_resume_of_a_session_the_store_lacks_fails_clearly(tmp_path: Path, capsys) -> None:
    """A state names its session; resumed against another data dir, the run stops before any model request."""
    exchange = tmp_path / "exchange"
    state = AgentState(plan=AgentPlan(backend="hlsl", model=f"exchange:{exchange}", exchange_wait_s=0),
                       session_id="0123456789ab", instructions="optimize", at_start=[0], seconds=1.0, requests=0,
                       turns=0, pending=1, exchange=str(exchange),
                       messages=dump_messages([ModelRequest(parts=[UserPromptPart("go")])]))
    save(state, tmp_path / "state.json")
    exchange.mkdir()
    (exchange / "request-1.json").write_text(json.dumps({"n": 1, "run": state.plan.run}))
    (exchange / "reply-1.txt").write_text("done")
    code, printed, err = cli("agent", "--resume", str(tmp_path / "state.json"), "--data-dir",
                             str(tmp_path / "other"), capsys=capsys)
    assert code == 1 and not printed
    assert "session 0123456789ab is not in this server's store" in err and "--data-dir" in err
    assert [p.name for p in exchange.glob("request-*.json")] == ["request-1.json"]  # no model request was made


def _request(n: int) -> Any:
    from peak_mcp.research.exchanges import Cell, Request

    return Request(system_prompt="s", messages=[], max_tokens=100), Cell(model="m", transformation="t", repeat=n)


def test_a_resumed_exchange_reads_only_its_own_request_then_counts_past_other_runs(tmp_path: Path) -> None:
    """Review 43 (F3): two runs share one exchange folder. A resumed run asks its pending request again under its
    own number, and its next one after the folder's highest, never another run's number (it read run B's reply
    to B's request 2 before); a pending request file that is not the run's own is refused, its reply unread."""
    from peak_mcp.research.exchange import FolderExchange, NoReply, Waiting

    async def go() -> None:
        a = FolderExchange(tmp_path, timeout_s=0, run="a" * 16)
        with pytest.raises(Waiting):
            await a(*_request(1))  # run A waits at 1
        b = FolderExchange(tmp_path, timeout_s=0, run="b" * 16)
        with pytest.raises(Waiting):
            await b(*_request(2))  # run B at 2
        (tmp_path / "reply-1.txt").write_text("A's reply")
        (tmp_path / "reply-2.txt").write_text("B's kernel for B's problem")
        resumed = FolderExchange(tmp_path, timeout_s=0, start=1, run="a" * 16)
        assert (await resumed(*_request(1))).text == "A's reply"
        with pytest.raises(Waiting) as waiting:
            await resumed(*_request(2))
        assert waiting.value.n == 3 and json.loads((tmp_path / "request-3.json").read_text())["run"] == "a" * 16
        stranger = FolderExchange(tmp_path, timeout_s=0, start=2, run="c" * 16)
        with pytest.raises(NoReply, match="not this run's request"):
            await stranger(*_request(2))

    anyio.run(go)


def test_a_state_naming_another_model_or_missing_folders_is_refused(tmp_path: Path, capsys) -> None:
    """Review 43 (F4): only an exchange run waits, so a state naming an API model (whose base URL would receive the
    API key), another folder, a pending request that is not there, or a NaN time is no state a run wrote."""
    exchange = tmp_path / "ex"
    exchange.mkdir()
    base = AgentState(plan=AgentPlan(backend="hlsl", model=f"exchange:{exchange}", exchange_wait_s=0),
                      session_id="0123456789ab", instructions="optimize", at_start=[0], seconds=1.0, requests=0,
                      turns=0, pending=1, exchange=str(exchange),
                      messages=dump_messages([ModelRequest(parts=[UserPromptPart("go")])]))
    (exchange / "reply-1.txt").write_text("done")
    forged = {
        "no_request": base,
        "api_model": base.model_copy(update={"plan": base.plan.model_copy(update={
            "model": "openai:gpt-4o", "base_url": "https://attacker.example/v1"})}),
        "other_folder": base.model_copy(update={"plan": base.plan.model_copy(update={
            "model": f"exchange:{tmp_path / 'elsewhere'}"})}),
    }
    for name, state in forged.items():
        save(state, tmp_path / f"{name}.json")
        code, _, err = cli("agent", "--resume", str(tmp_path / f"{name}.json"), capsys=capsys)
        assert code == 2, (name, err)
    nan = json.loads(base.model_dump_json())
    nan["seconds"] = "NaN"
    (tmp_path / "nan.json").write_text(json.dumps(nan))
    code, _, err = cli("agent", "--resume", str(tmp_path / "nan.json"), capsys=capsys)
    assert code == 2 and "seconds" in err
    assert not (tmp_path / "elsewhere").exists()
