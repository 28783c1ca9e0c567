"""Verdicts rest on timings of one moment, never a fresh timing against another version's stale submit-time record
(agent44b #20, #34, #38, #41, #42: one lucky 3.6 ms run of v2, whose re-runs took 6.7 and 6.9 ms, gave four wrong
verdicts). Stand-in devices (tests/stand_in_devices.py: a configuration takes sum(values) / 100 ms in full; A=8 B=20,
TUNED's defaults, 0.28 ms) and a stand-in H100 (tests/stand_in_worker.py: a `// TIMES` line sets the time) make every
timing exact; a stale record is a stored timing set apart from what its source times at."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_fanout import H200, Rig

OWN = {"A": 8, "B": 20}


def _stale(r: Rig, sid: str, v: int, ms: float) -> None:
    """v's submit-time record made `ms` (a run the machine's load made lucky or unlucky)."""
    timing = r.service.store.version(sid, v).timing
    assert timing is not None and timing.median_ms == pytest.approx(0.28)
    r.service.store.update_version(sid, v, timing=timing.model_copy(update={"median_ms": ms}).model_dump(mode="json"))


def _full_timings(r: Rig) -> list[dict[str, int]]:
    return [j["params"] for j in r.jobs() if j["type"] == "evaluate"]


def test_tune_times_the_own_configuration_beside_the_candidate_and_judges_on_that_pair(tmp_path: Path) -> None:
    """#34: v's record (0.02 ms) is a lucky run; its configuration takes 0.28 ms. The search's fastest, A=1 B=2, takes
    0.03 ms in full: against the record it would be kept out ("no faster than v's own configuration"); against the
    own configuration timed in the same round it wins."""
    r = Rig(tmp_path, [H200])
    try:
        sid, v = r.session(0)
        _stale(r, sid, v, 0.02)
        report = r.service.tune(sid, v, max_configs=16)
        assert _full_timings(r) == [{"A": 1, "B": 2}, OWN]  # back to back, the candidate first
        assert report.own is not None and report.own.median_ms == pytest.approx(0.28) and report.own.params == OWN
        assert report.recorded is not None and report.recorded.params == {"A": 1, "B": 2}, report.stopped
        assert report.versus_own and "0.28 ms timed in full back to back in this round" in report.versus_own
        assert "faster beyond noise" in report.versus_own, report.versus_own
        row = r.service.store.version(sid, v)
        assert row.timing is not None and row.timing.median_ms == pytest.approx(0.03)
        assert row.submitted_timing is not None and row.submitted_timing.median_ms == pytest.approx(0.02)  # kept
    finally:
        r.close()


def test_tune_keeps_the_own_configuration_when_it_wins_the_round_and_records_no_lone_re_timing(tmp_path: Path) -> None:
    """The other way: v's record is an unlucky 0.5 ms; a re-timing that ranks A=9 B=40 (0.49 ms in full) first makes
    it the candidate. Against the record it would be adopted (0.49 < 0.5); against the own configuration's 0.28 ms
    in the same round it is slower, so v keeps its configuration. That re-timing was beside a configuration, not
    another version: no version's ratio reads it (agent45 #8, #9)."""
    r = Rig(tmp_path, [H200], d0={"search_ms": {"A=9 B=40": 0.001}, "retime_ms": {"A=9 B=40": 0.001}})
    try:
        sid, v = r.session(0)
        _stale(r, sid, v, 0.5)
        report = r.service.tune(sid, v, max_configs=16)
        assert _full_timings(r) == [{"A": 9, "B": 40}, OWN]
        assert report.recorded is None and report.full is not None and report.full.params == {"A": 9, "B": 40}
        assert "is no faster than v1's own configuration (0.28 ms, timed in full back to back in this round, " \
               "slower beyond noise), which it keeps" in report.stopped, report.stopped
        row = r.service.store.version(sid, v)
        assert row.timing is not None and row.timing.median_ms == 0.5 and row.timing.params == OWN  # the record
        assert row.retimed is None
    finally:
        r.close()


def test_a_search_estimate_far_from_the_own_configuration_s_full_time_sends_the_next_ones_to_a_full_timing(
        tmp_path: Path) -> None:
    """#20: the re-timing put v's own configuration first at 0.02 ms, 14x off its full 0.28 ms, and tune said "nothing
    to adopt". Now the next fastest are timed in full beside it, and the fastest of them (A=1 B=2, 0.03 ms) is
    taken."""
    r = Rig(tmp_path, [H200], d0={"search_ms": {"A=8 B=20": 0.001}, "retime_ms": {"A=8 B=20": 0.02}})
    try:
        sid, v = r.session(0)
        report = r.service.tune(sid, v, max_configs=16)
        assert report.retimed and "the fastest then: A=8 B=20" in (report.chosen_by or ""), report.chosen_by
        assert _full_timings(r) == [{"A": 1, "B": 2}, OWN, {"A": 7, "B": 2}]  # own between the two runners-up
        assert "is v1's own configuration, but its estimate (0.02 ms) is far from its recorded full time (0.28 ms)" \
            in report.stopped, report.stopped
        assert report.recorded is not None and report.recorded.params == {"A": 1, "B": 2}
        assert report.best is not None and report.best.params == {"A": 1, "B": 2}  # what the answer heads "best"
        assert [c.params for c in report.runners_up] == [{"A": 7, "B": 2}]
        assert report.own is not None and report.own.median_ms == pytest.approx(0.28)
    finally:
        r.close()


def test_an_estimate_near_the_own_configuration_s_full_time_costs_no_full_timing(tmp_path: Path) -> None:
    """Nothing to adopt and nothing timed in full where the search's fastest is the own configuration at an estimate
    within 1.3x of its record (a GPU tune's throughput, issue 35); the re-timing puts the next two behind it."""
    r = Rig(tmp_path, [H200], d0={"search_ms": {"A=8 B=20": 0.001},
                                  "retime_ms": {"A=8 B=20": 0.25, "A=1 B=2": 0.3, "A=7 B=2": 0.3}})
    try:
        sid, v = r.session(0)
        report = r.service.tune(sid, v, max_configs=16)
        assert _full_timings(r) == [] and "own configuration: nothing to adopt" in report.stopped, report.stopped
        assert report.own is None
    finally:
        r.close()


# --- a submission against a stale parent record; what later comparisons read -----------------------------------

LEVEL = "median=7 p25=6.9 p75=7.1"  # what v1 and v2 take whenever they are timed


async def _h100(tmp_path: Path):
    from tests.test_truth import CUDA_GPU, _served

    return _served(tmp_path, "stand_in_worker.py", CUDA_GPU)


async def _child(client, sid: str, naive: str, parent: int, text: str, times: str) -> dict:
    from tests.test_truth import _call

    answer = await _call(client, "submit_kernel", {"session_id": sid, "parent": parent, "transformation": text,
                                                   "source": f"{naive}// TIMES {times}\n"})
    return {"text": answer.content[0].text, **answer.structured_content}


def _lucky(service, sid: str, v: int) -> None:
    """v's submit-time record made a lucky 3.6 ms; its source times at 7 ms whenever it runs."""
    timing = service.store.version(sid, v).timing
    service.store.update_version(sid, v, timing=timing.model_copy(update={
        "median_ms": 3.6, "p25_ms": 3.55, "p75_ms": 3.65}).model_dump(mode="json"))


@pytest.mark.anyio
async def test_a_submission_slower_than_a_stale_parent_record_re_times_the_parent_and_is_judged_on_the_pair(
        tmp_path: Path) -> None:
    """#38: v2 read "0.518x its parent (slower beyond noise)" against v1's lucky 3.6 ms; back to back they were
    level. The parent is timed again right after the child, and the verdict says so; the record stays in history."""
    from tests.test_truth import _call

    async with await _h100(tmp_path) as (client, service):
        sid = (await _call(client, "start_session", {"backend": "cuda", "sizes": {"M": 64, "N": 64, "K": 64}})
               ).structured_content["session_id"]
        naive = service.store.version(sid, 0).source
        v1 = (await _child(client, sid, naive, 0, "register-blocking-2d", LEVEL))["version"]
        _lucky(service, sid, v1)
        v2 = await _child(client, sid, naive, v1, "vectorized-loads", LEVEL)
        perf = v2["report"]["performance"] if "report" in v2 else v2["performance"]
        assert perf["change_vs_parent"] == "within noise" and perf["speedup_vs_parent"] == pytest.approx(1.0), perf
        assert "v1 re-timed back to back with this version at 7 ms; its own record 3.6 ms" in \
            perf["parent_retimed"], perf
        assert "1× its parent (within noise: v1 re-timed" in v2["text"], v2["text"]
        assert "slower beyond noise" not in v2["text"] and "slowdown" not in v2["text"], v2["text"]
        assert v2["note"] == ("head → v2 (1.00× its parent v1: within noise, v1 re-timed back to back); best: v1 "
                              "(3.6 ms, re-timed back to back with v2 at 7 ms), head is 1.00× as fast (within "
                              "noise)"), v2["note"]
        row = service.store.version(sid, v1)
        assert row.timing.median_ms == 3.6 and row.retimed is not None and row.retimed.timing.median_ms == 7
        assert row.retimed.beside == v2["version"]
        # a child faster than its parent's figure is not re-timed: v2's record stays its only figure
        v3 = await _child(client, sid, naive, v2["version"], "loop-unrolling-and-launch-bounds",
                          "median=5 p25=4.9 p75=5.1")
        assert service.store.version(sid, v2["version"]).retimed is None and "v2 re-timed" not in v3["text"]
        # history keeps v1's record; v2's ×parent is the pair's
        table = (await _call(client, "history", {"session_id": sid})).content[0].text
        assert "| 3.6 |" in table and "†: against the base re-timed back to back" in table, table
        assert next(line for line in table.splitlines() if line.startswith(f"| {v2['version']} ")).count("†") >= 1
        assert "| 1.00† (noise) |" in table, table
        # #42: the stats read the pair: v2's text made no difference; v1's own gain stays its submission's (records:
        # v0's 10 ms over v1's 3.6 ms), since v1 was re-timed beside v2, not beside v0
        stats = (await _call(client, "get_transformation_stats", {"session_id": sid})).structured_content
        rows = {s["transformation"]: s for s in stats["transformations"]}
        assert rows["vectorized-loads"]["slowdowns"] == 0 and rows["vectorized-loads"]["within_noise"] == 1
        assert rows["register-blocking-2d"]["median_speedup_vs_parent"] == pytest.approx(10 / 3.6, rel=0.01)


@pytest.mark.anyio
async def test_a_benchmark_re_timing_changes_no_ratio(tmp_path: Path) -> None:
    """A lone benchmark run of one version is not compared with other versions' records (agent45 #8: one loaded run
    of v0 turned a 2-3x slower child into 'noise'): the benchmark says so, stores nothing the ratios read, and
    suggest_next's advice, which reads records (or a back-to-back pair), is what it was."""
    from tests.test_truth import _call

    async with await _h100(tmp_path) as (client, service):
        sid = (await _call(client, "start_session", {"backend": "cuda", "sizes": {"M": 64, "N": 64, "K": 64}})
               ).structured_content["session_id"]
        naive = service.store.version(sid, 0).source
        v1 = (await _child(client, sid, naive, 0, "register-blocking-2d", LEVEL))["version"]
        _lucky(service, sid, v1)
        v2 = (await _child(client, sid, naive, 0, "vectorized-loads", LEVEL))["version"]  # v1's sibling: head
        assert service.store.session(sid).head == v2 and service.store.version(sid, v1).retimed is None

        async def advice() -> str:
            return (await _call(client, "suggest_next", {"session_id": sid})).content[0].text

        before = await advice()
        assert f"revert(version={v1})" in before  # the records
        checked = await _call(client, "benchmark", {"session_id": sid, "version": v1})
        assert "ratios keep reading the records" in checked.structured_content["scope"], \
            checked.structured_content["scope"]
        row = service.store.version(sid, v1)
        assert row.retimed is None and row.timing.median_ms == 3.6
        assert f"revert(version={v1})" in await advice()


@pytest.mark.anyio
async def test_a_parent_whose_re_timing_fails_leaves_the_verdict_on_its_record_and_the_answer_says_so(
        tmp_path: Path) -> None:
    """The parent re-timed beside a slower child can fail (its stored kernel no longer passes, a problem file's error,
    a fault): the child still gets its verdict, on the parent's record, and its answer says the re-timing failed
    rather than only a progress line the agent may never read."""
    from tests.test_truth import _call

    async with await _h100(tmp_path) as (client, service):
        sid = (await _call(client, "start_session", {"backend": "cuda", "sizes": {"M": 64, "N": 64, "K": 64}})
               ).structured_content["session_id"]
        naive = service.store.version(sid, 0).source
        v1 = (await _child(client, sid, naive, 0, "register-blocking-2d", LEVEL))["version"]
        _lucky(service, sid, v1)
        service.store.update_version(sid, v1, source=service.store.version(sid, v1).source + "// PROBLEM_ERROR\n")
        v2 = await _child(client, sid, naive, v1, "vectorized-loads", LEVEL)
        assert v2["status"] == "benchmarked", v2
        assert "slower beyond noise" in v2["text"], v2["text"]  # on v1's 3.6 ms record: nothing else to read
        assert f"v{v1}'s re-timing back to back failed (problem_error)" in v2["text"], v2["text"]
        assert service.store.version(sid, v1).retimed is None
        assert "\x1b" not in v2["text"] and len(v2["text"]) < 4000, v2["text"]  # the failure said cleaned, cut


@pytest.mark.anyio
async def test_the_child_s_measurement_is_stored_before_its_parent_is_re_timed(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent's re-timing can last until the inactivity timeout (a parent that hangs now): a server that dies
    meanwhile must not lose the child's timing, which is measured already (here the re-timing raises instead)."""
    from peak_mcp.loop.pipeline import submit
    from tests.test_truth import _call

    def dies(*_: object, **__: object) -> None:
        raise RuntimeError("the server died while the parent was re-timed")

    async with await _h100(tmp_path) as (client, service):
        sid = (await _call(client, "start_session", {"backend": "cuda", "sizes": {"M": 64, "N": 64, "K": 64}})
               ).structured_content["session_id"]
        naive = service.store.version(sid, 0).source
        v1 = (await _child(client, sid, naive, 0, "register-blocking-2d", LEVEL))["version"]
        monkeypatch.setattr(submit, "retime_parent", dies)
        died = await client.call_tool("submit_kernel", {"session_id": sid, "parent": v1,
                                                         "source": f"{naive}// TIMES {LEVEL}\n"})
        assert died.is_error
        child = service.store.versions(sid)[-1]
        assert child.number == v1 + 1 and child.timing is not None and child.timing.median_ms == 7, child


def test_history_marks_a_ratio_whose_base_was_re_timed_back_to_back() -> None:
    """Agent 47: the history's ×v0 read 1.05 (noise) beside ms 6.382 against v0's 5.476 (0.86 by the rows): its
    base was v0 re-timed back to back with that version. Such a ratio is marked, and a line says what it means."""
    from peak_mcp.evaluation.noise import NOISE
    from peak_mcp.store.reports import RETIMED_MARK, markdown_table

    rows = [{"version": 0, "parent": None, "origin": "naive", "transformation": None, "attempt": None,
             "status": "benchmarked", "failure": None, "median_ms": 5.476, "tflops": None, "gbps": 1.4},
            {"version": 1, "parent": 0, "origin": "submit", "transformation": None, "attempt": None,
             "status": "benchmarked", "failure": None, "median_ms": 6.382, "tflops": None, "gbps": 1.3,
             "speedup_vs_parent": 1.05, "change_vs_parent": NOISE, "parent_retimed": True,
             "speedup_vs_v0": 1.05, "change_vs_v0": NOISE, "v0_retimed": True},
            {"version": 2, "parent": 0, "origin": "submit", "transformation": None, "attempt": None,
             "status": "benchmarked", "failure": None, "median_ms": 5.0, "tflops": None, "gbps": 1.5,
             "speedup_vs_parent": 1.1, "change_vs_parent": None, "speedup_vs_v0": 1.1, "change_vs_v0": None}]
    table = markdown_table(rows)
    one = next(line for line in table.splitlines() if line.startswith("| 1 "))
    two = next(line for line in table.splitlines() if line.startswith("| 2 "))
    assert one.count(f"1.05{RETIMED_MARK} (noise)") == 2 and RETIMED_MARK not in two
    assert f"{RETIMED_MARK}: against the base re-timed back to back" in table
    assert RETIMED_MARK not in markdown_table([rows[0], rows[2]])  # no mark, no line
