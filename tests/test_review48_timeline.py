"""Review 48 of 458f142 (a timeline merges a heartbeat's repeated lines): with a twin device's lines sorted in, the
repeats of either timeline were no longer neighbours, so nothing merged and the 64-line cap cut the record."""

from __future__ import annotations


def test_a_twins_lines_between_a_heartbeats_repeats_do_not_keep_them_apart() -> None:
    # on a host with a twin device, the session's timing and the twin's sanitizer beat at once: sorted together,
    # no two repeats were neighbours, and 40 + 40 beats cut the record at 64 lines for two steps
    from peak_mcp.loop.timeline import Recorder

    recorder = Recorder(lambda _: None)
    twin = Recorder(lambda _: None, started=recorder.started)
    recorder.beside(twin, "beside")
    recorder.steps += [(1.0 + 0.5 * i, "benchmark: timed launches") for i in range(40)] + [(30.0, "verdict")]
    twin.steps += [(1.25 + 0.5 * i, "sanitizer: running") for i in range(40)]
    steps = recorder.timeline().steps
    assert steps == [(0.0, "admit"), (1.0, "benchmark: timed launches"), (1.25, "[beside] sanitizer: running"),
                     (30.0, "verdict")]
