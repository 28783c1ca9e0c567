"""A small soak (tools/soak.py): 3 HTTP clients, 60 submissions, kill -9 of the server halfway, restart on the same
data dir; nothing acknowledged is lost and nothing stays pending."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT


def test_kill_and_restart_loses_nothing_acknowledged(tmp_path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "soak.py"), "--submissions", "60", "--clients", "3",
                           "--max-seconds", "240", "--data-dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)})
    summary = json.loads(done.stdout)
    assert summary["killed_after_attempts"] == 30
    assert summary["lost"] == 0 and summary["pending_after_restart"] == 0, summary
    assert summary["submissions_attempted"] == 60
    assert summary["acknowledged"] + summary["client_errors"] >= 60, summary
    assert summary["records_in_sqlite"] >= summary["acknowledged"] + 1  # + version 0
    assert done.returncode == 0
