"""Issue 35: reading 100 KernelBench files took 306 s, and every restart read them again. A file read once is kept
in the data dir by its fingerprint and the reader's version, so a new server (a restart) describes nothing that did
not change; a changed file, a torn cache entry or a failure is read again."""

from __future__ import annotations

from pathlib import Path

import pytest

import peak_mcp.problems.registry as registry_module
from peak_mcp.problems.registry import ProblemRegistry
from tests.test_problem_files import GOOD, write


@pytest.fixture
def described(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Each file the registry sends to the (real, confined) describe subprocess; none from this process's memo."""
    monkeypatch.setattr(registry_module, "_described", {})
    seen: list[Path] = []
    real = registry_module.describe_in_subprocess

    def counted(path: Path, **kwargs: object) -> object:
        seen.append(path)
        return real(path, **kwargs)

    monkeypatch.setattr(registry_module, "describe_in_subprocess", counted)
    import peak_mcp.loop.problem_files as problem_files  # define_problem's own reading (bound at its import)

    monkeypatch.setattr(problem_files, "describe_in_subprocess", counted)
    return seen


def _fresh(folder: Path, cache: Path) -> ProblemRegistry:
    registry_module._described.clear()  # a new process: nothing in memory
    return ProblemRegistry([folder], builtin_dir=None, cache_dir=cache)


def test_a_restart_reads_no_file_that_did_not_change(tmp_path: Path, described: list[Path]) -> None:
    folder, cache = tmp_path / "problems", tmp_path / "data" / "cache" / "described"
    folder.mkdir()
    path = write(folder, "scale", GOOD.format(name="scale2"))
    first = _fresh(folder, cache).get("scale2")
    assert described == [path] and len(list(cache.glob("*.json"))) == 1
    again = _fresh(folder, cache).get("scale2")
    assert described == [path]  # kept: not read again
    assert again.declaration == first.declaration and again.source == str(path)
    path.write_text(path.read_text().replace("Scale: y = 2 x.", "Scale: y = 2 x, changed."))
    changed = _fresh(folder, cache).get("scale2")
    assert described == [path, path] and "changed" in changed.declaration.doc


def test_a_torn_entry_is_read_again_and_replaced(tmp_path: Path, described: list[Path]) -> None:
    folder, cache = tmp_path / "problems", tmp_path / "cache"
    folder.mkdir()
    path = write(folder, "scale", GOOD.format(name="scale2"))
    _fresh(folder, cache).get("scale2")
    (entry,) = cache.glob("*.json")
    entry.write_text('{"path": "/etc/passwd", "na')  # torn (or written by something else)
    assert _fresh(folder, cache).get("scale2").source == str(path)
    assert described == [path, path] and entry.read_text().startswith("{") and "scale2" in entry.read_text()


def test_a_file_that_fails_is_not_kept(tmp_path: Path, described: list[Path]) -> None:
    folder, cache = tmp_path / "problems", tmp_path / "cache"
    folder.mkdir()
    write(folder, "broken", 'NAME = "broken"\nraise RuntimeError("no")\n')
    for _ in range(2):
        assert any("broken" in e.file for e in _fresh(folder, cache).errors)
    assert len(described) == 2 and not list(cache.glob("*.json"))


@pytest.mark.anyio
async def test_define_problem_reads_the_file_once(make_client, settings, described: list[Path]) -> None:
    """define_problem read a file confined before saving it, then the refresh read the saved file again: twice the
    wait (a KernelBench module's describe is tens of seconds)."""
    from tests.test_define_problem import NEGATE

    async with make_client() as (client, _):
        defined = await client.call_tool("define_problem", {"source": NEGATE})
        assert not defined.is_error, defined.content[0].text
        listed = await client.call_tool("list_problems", {})
        assert not listed.is_error and "negate" in listed.content[0].text
    assert len([p for p in described if p.name == "negate.py"]) == 1, described
    assert (settings.defined_problems / "negate.py").exists()


def test_a_session_on_a_known_problem_waits_on_no_other_reading(tmp_path: Path, described: list[Path]) -> None:
    """start_session read every new or changed file of every folder first: a session on one problem waited on the
    reading of others (a folder of 100 KernelBench files: minutes). It now reads only what its own problem needs."""
    folder = tmp_path / "problems"
    folder.mkdir()
    path = write(folder, "scale", GOOD.format(name="scale2"))
    registry = ProblemRegistry([folder], builtin_dir=None, cache_dir=tmp_path / "cache")
    registry.get("scale2")
    slow = write(folder, "slow", 'NAME = "slow"\nimport time\ntime.sleep(60)\n')
    registry.refresh_for("scale2")
    assert described == [path]  # the new file is left for list_problems or the background
    path.write_text(path.read_text().replace("Scale: y = 2 x.", "Scale: y = 2 x, changed."))
    registry.timeout_s = 3
    registry.refresh_for("scale2")  # its own file changed: read again (a refresh: the slow one too, stopped at 3 s)
    assert described.count(path) == 2 and slow in described
    assert "changed" in registry.get("scale2").declaration.doc


def test_the_background_reading_leaves_the_folders_read(tmp_path: Path, described: list[Path]) -> None:
    folder = tmp_path / "problems"
    folder.mkdir()
    path = write(folder, "scale", GOOD.format(name="scale2"))
    registry = ProblemRegistry([folder], builtin_dir=None)
    registry.refresh_in_background().join(timeout=120)
    assert described == [path]
    assert registry.get("scale2").source == str(path) and described == [path]  # read already: not again


def test_a_file_below_the_folder_changing_is_read_again(tmp_path: Path, described: list[Path]) -> None:
    """A NAIVE kernel may sit in a subfolder: a change there must reach the kept declaration (review finding)."""
    folder, cache = tmp_path / "problems", tmp_path / "cache"
    (folder / "kernels").mkdir(parents=True)
    (folder / "kernels" / "naive.hlsl").write_text("// one\n")
    path = write(folder, "scale", GOOD.format(name="scale2"))
    _fresh(folder, cache).get("scale2")
    (folder / "kernels" / "naive.hlsl").write_text("// two, longer\n")
    _fresh(folder, cache).get("scale2")
    assert described == [path, path]


def test_a_declaration_of_other_bytes_is_never_kept_nor_served(tmp_path: Path, described: list[Path]) -> None:
    """A file that changed between its fingerprint and its reading must not leave one content's declaration under
    another content's key."""
    from peak_mcp.problems.described_cache import DescribedCache
    from peak_mcp.problems.registry import fingerprint

    folder, cache = tmp_path / "problems", tmp_path / "cache"
    folder.mkdir()
    path = write(folder, "scale", GOOD.format(name="scale2"))
    declaration = _fresh(folder, cache).get("scale2").declaration
    kept = DescribedCache(cache)
    print_ = fingerprint(path)
    assert kept.get(path, print_) == declaration
    other = declaration.model_copy(update={"sha256": "0" * 64})
    for entry in cache.glob("*.json"):
        entry.unlink()
    kept.put(path, print_, other)  # not the file's bytes: refused
    assert not list(cache.glob("*.json"))
    (cache / kept._file(path, print_).name).write_text(other.model_dump_json())  # written there anyway
    assert kept.get(path, print_) is None
