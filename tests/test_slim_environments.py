"""What keeps the lanes' environments small: removing what an environment cannot load
(``k2conform.setup.prune``: only an object whose needed library is found nowhere goes, and what
needs a removed object after it; compiled here with gcc, so each object is a real ELF file with
real ``DT_NEEDED`` entries) and storing identical files once (``k2conform.setup.share``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from k2conform.setup import parsers
from k2conform.setup.prune import needed, prune, system_libraries, unloadable
from k2conform.errors import UsageError
from k2conform.setup.share import Store

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build objects")


def _library(where: Path, name: str, *links: str, search: Path | None = None) -> Path:
    """``lib<name>.so`` in ``where``, linked against ``lib<link>.so`` for each link."""
    source = where / f"{name}.c"
    source.write_text(f"int {name}_value(void) {{ return 1; }}\n")
    target = where / f"lib{name}.so"
    flags = [f"-L{search or where}", *(f"-l{link}" for link in links)]
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,--no-as-needed", "-o", str(target), str(source), *flags],
        check=True,
        capture_output=True,
    )
    source.unlink()
    return target


@needs_gcc
def test_needed_reads_the_libraries_an_object_names(tmp_path):
    """The ELF reader agrees with the linker: the names given at link time, libc too."""
    _library(tmp_path, "ghost")
    needs = _library(tmp_path, "needs", "ghost")
    assert needed(needs)[:2] == ["libghost.so", "libc.so.6"]
    not_elf = tmp_path / "fake.so"
    not_elf.write_bytes(b"not an object")
    assert needed(not_elf) is None


@needs_gcc
def test_only_what_needs_a_library_found_nowhere_goes_and_what_needs_it_follows(tmp_path):
    """libneeds needs libghost, which is gone: it goes, and libchain, which needs libneeds, after
    it; libfine (libc only), a file that is no ELF object, and libseen, whose library another
    visible environment has, stay."""
    own, base, scratch = tmp_path / "own", tmp_path / "base", tmp_path / "scratch"
    for folder in (own, base, scratch):
        folder.mkdir()
    _library(scratch, "ghost")
    _library(own, "needs", "ghost", search=scratch)
    _library(own, "chain", "needs")
    _library(own, "fine")
    _library(base, "shared")
    _library(own, "seen", "shared", search=base)
    (own / "fake.so").write_bytes(b"not an object")
    gone = unloadable(own, [base], system_libraries())
    assert {(item.path.name, item.missing) for item in gone} == {
        ("libneeds.so", "libghost.so"),
        ("libchain.so", "libneeds.so"),
    }
    assert all(item.size > 0 for item in gone)
    left = {p.name for p in own.iterdir()}
    assert left == {"libneeds.so", "libchain.so", "libfine.so", "libseen.so", "fake.so"}
    prune(own, [base])
    assert {p.name for p in own.iterdir()} == {"libfine.so", "libseen.so", "fake.so"}
    # Without the base, libseen's library is found nowhere either.
    assert [item.path.name for item in unloadable(own, [], system_libraries())] == ["libseen.so"]


def test_identical_files_are_stored_once_and_nothing_else_is_touched(tmp_path):
    """Two environments with the same file share one inode; a different file, the same bytes
    with another mode, a symlink and empty files stay as they were."""
    one, two = tmp_path / "one", tmp_path / "two"
    for venv in (one, two):
        (venv / "pkg").mkdir(parents=True)
        (venv / "pkg" / "same.py").write_text("x = 1\n" * 100)
        (venv / "pkg" / "empty.py").write_text("")
    (one / "pkg" / "own.py").write_text("a = 1\n")
    (two / "pkg" / "own.py").write_text("b = 2\n")
    (one / "tool").write_text("run\n")
    (two / "tool").write_text("run\n")
    (two / "tool").chmod(0o755)
    (two / "link.py").symlink_to(two / "pkg" / "same.py")
    store = Store()
    assert store.add(one) == (0, 0)
    assert store.add(two) == (1, 600)
    assert (one / "pkg" / "same.py").stat().st_ino == (two / "pkg" / "same.py").stat().st_ino
    for name in ("pkg/own.py", "tool", "pkg/empty.py"):
        assert (one / name).stat().st_ino != (two / name).stat().st_ino, name
    assert (two / "pkg" / "own.py").read_text() == "b = 2\n"
    assert (two / "link.py").is_symlink()
    assert store.add(two) == (0, 0)  # done once
    fresh = Store()
    assert (fresh.add(one), fresh.add(two)) == ((0, 0), (0, 0))
    assert not list(tmp_path.rglob("*.k2conform-link"))


def test_a_source_overlay_replaces_a_shared_file_without_writing_into_its_twin(
    tmp_path, monkeypatch
):
    """A candidate's checkout laid over a release whose files are linked to another
    environment's must leave that environment's copy as it was."""
    source, venv, other = tmp_path / "src", tmp_path / "venv", tmp_path / "other"
    (source / "vllm").mkdir(parents=True)
    (source / "vllm" / "__init__.py").write_text("")
    (source / "vllm" / "parser.py").write_text("fixed = True\n")
    for root in (venv, other):
        (root / "vllm").mkdir(parents=True)
        (root / "vllm" / "parser.py").write_text("fixed = False\n")
    store = Store()
    store.add(venv)
    store.add(other)
    assert (venv / "vllm" / "parser.py").stat().st_nlink == 2
    monkeypatch.setattr(parsers, "_site_packages", lambda python: venv)
    monkeypatch.setattr(parsers, "_record", lambda *a, **k: None)
    environment = parsers.Environment("vllm-src", (), ("vllm",), over="parsers")
    assert parsers.overlay(environment, "vllm", source, tmp_path) == [
        "vllm/__init__.py",
        "vllm/parser.py",
    ]
    assert (venv / "vllm" / "parser.py").read_text() == "fixed = True\n"
    assert (other / "vllm" / "parser.py").read_text() == "fixed = False\n"


def test_a_file_the_filesystem_will_not_link_stays_a_copy(tmp_path, monkeypatch):
    """Linking saves space and never fails a build: a refused link (too many links, a
    filesystem without them) leaves both copies, and no spare file, behind."""
    import errno
    import os

    from k2conform.setup import share as share_module

    def refuse(source, target):
        raise OSError(errno.EMLINK, "Too many links")

    one, two = tmp_path / "one", tmp_path / "two"
    for venv in (one, two):
        venv.mkdir()
        (venv / "same.py").write_text("x = 1\n")
    monkeypatch.setattr(share_module.os, "link", refuse)
    store = Store()
    store.add(one)
    assert store.add(two) == (0, 0)
    assert (two / "same.py").read_text() == "x = 1\n"
    assert os.stat(one / "same.py").st_ino != os.stat(two / "same.py").st_ino
    assert sorted(p.name for p in two.iterdir()) == ["same.py"]


def test_an_object_that_cannot_be_removed_is_one_line_naming_the_way_out(tmp_path, monkeypatch):
    """setup-parsers fails with one line (exit 2), not a traceback."""
    from k2conform.setup import prune as prune_module
    from k2conform.setup.prune import Unloadable

    stuck = tmp_path / "libstuck.so"
    stuck.write_bytes(b"x")
    monkeypatch.setattr(
        prune_module,
        "unloadable",
        lambda own, visible, system: [Unloadable(stuck, 1, "libghost.so")],
    )
    monkeypatch.setattr(parsers, "_site_packages", lambda python: tmp_path)

    def refuse(self, missing_ok=False):
        raise PermissionError(1, "Operation not permitted", str(self))

    monkeypatch.setattr(prune_module.Path, "unlink", refuse)
    environment = parsers.Environment("vllm-0.11.0", (), ("vllm-legacy",), over="parsers")
    with pytest.raises(UsageError) as raised:
        parsers._prune(environment, "python", None, print)
    message = str(raised.value)
    assert message.startswith("environment vllm-0.11.0: could not remove what it cannot load: ")
    assert "libstuck.so" in message and "--keep-unloadable" in message and "\n" not in message
