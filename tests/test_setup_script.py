"""tools/setup.sh on a machine where apt is busy: it waits for apt's locks instead of failing at once (issue 20).
Run from a copy of the script beside stand-ins for apt-get, dpkg, id, sleep and python3, so nothing is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCKED = ("E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)\n"
          "E: Unable to lock directory /var/lib/apt/lists/")


def _tree(tmp_path: Path, update_failures: int, message: str = LOCKED) -> tuple[Path, Path]:
    repo, bin_dir = tmp_path / "repo", tmp_path / "bin"
    (repo / "tools").mkdir(parents=True)
    (repo / ".ci").mkdir()
    shutil.copy(ROOT / "tools" / "setup.sh", repo / "tools" / "setup.sh")
    (repo / ".ci" / "apt-packages.txt").write_text("# test\nlibvulkan1\n")
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    stubs = {
        "dpkg": "exit 1",  # every package is missing
        "id": "echo 0",  # root: apt-get without sudo
        "sleep": f'echo "sleep $*" >> {calls}',
        "python3": f"""echo "python3 $*" >> {calls}
mkdir -p .venv/bin && printf '#!/bin/bash\\necho ".venv/bin/python $*" >> {calls}\\n' > .venv/bin/python
chmod +x .venv/bin/python""",
        "apt-get": f"""echo "apt-get $*" >> {calls}
if [ "$(grep -c ' update ' {calls})" -le {update_failures} ] && [[ " $* " == *" update "* ]]; then
    printf '%s\\n' "{message}" >&2; exit 100
fi""",
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return repo, calls


def _run(repo: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    return subprocess.run(["bash", str(repo / "tools" / "setup.sh")], capture_output=True, text=True, env=env,
                          timeout=60)


def test_setup_waits_for_a_held_apt_lock(tmp_path: Path) -> None:
    repo, calls = _tree(tmp_path, update_failures=2)
    done = _run(repo, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = calls.read_text().splitlines()
    apt = [line for line in lines if line.startswith("apt-get")]
    assert [line.split()[3] for line in apt] == ["update", "update", "update", "install"], apt
    assert all("-o DPkg::Lock::Timeout=600" in line for line in apt), apt  # dpkg's own locks are waited for too
    assert lines.count("sleep 10") == 2 and done.stderr.count("apt is busy") == 2, done.stderr
    assert any(line.startswith("python3 -m venv .venv") for line in lines)


def test_setup_stops_at_an_apt_failure_that_is_not_a_lock(tmp_path: Path) -> None:
    repo, calls = _tree(tmp_path, update_failures=1, message="E: The repository is not signed.")
    done = _run(repo, tmp_path)
    assert done.returncode == 1 and "not signed" in done.stderr, done.stderr
    assert "sleep" not in calls.read_text() and "python3" not in calls.read_text()
