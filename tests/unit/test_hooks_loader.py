"""kopflet.hooks.loader: --hooks modules, files and registries, then the entry points; anything that cannot be loaded
is an error naming it."""

from __future__ import annotations

import sys
import textwrap
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from kopflet import hooks
from kopflet.hooks import loader

MODULE = """\
from kopflet import hooks

@hooks.admit(name="{name}.admit")
def admit(request):
    return None

own = hooks.Registry()

@own.plan(name="{name}.plan")
def plan(view):
    pass
"""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable package `hookpkg` on sys.path, with a fresh default registry."""
    (tmp_path / "hookpkg").mkdir()
    (tmp_path / "hookpkg" / "__init__.py").write_text("")
    (tmp_path / "hookpkg" / "policy.py").write_text(MODULE.format(name="pkg"))
    (tmp_path / "hookpkg" / "broken.py").write_text("raise RuntimeError('misconfigured')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(hooks.api, "registry", hooks.Registry())
    monkeypatch.setattr(hooks, "admit", hooks.api.registry.admit)
    for name in [n for n in sys.modules if n.startswith(("hookpkg", loader.FILE_MODULE_PREFIX))]:
        monkeypatch.delitem(sys.modules, name)
    return tmp_path


def names(found: tuple[hooks.Hook, ...]) -> list[tuple[str, str]]:
    return [(h.kind, h.name) for h in found]


def test_a_module_registers_with_its_decorators_and_a_named_registry_adds_its_own(package: Path) -> None:
    found = loader.load(["hookpkg.policy", "hookpkg.policy:own"], entry_points=False)
    assert names(found) == [("admit", "pkg.admit"), ("plan", "pkg.plan")]
    assert loader.load(["hookpkg.policy", "hookpkg.policy:own"], entry_points=False) == found  # again: nothing twice


def test_a_file_is_imported_as_a_module_of_its_own(package: Path) -> None:
    path = package / "node-policy.py"
    path.write_text(MODULE.format(name="file"))
    found = loader.load([f"{path}:own", str(path)], entry_points=False)
    assert names(found) == [("admit", "file.admit"), ("plan", "file.plan")]
    assert "kopflet_hooks_node_policy" in sys.modules


def test_entry_points_come_after_the_modules_by_name(package: Path) -> None:
    (package / "hookpkg" / "other.py").write_text(MODULE.format(name="other"))
    points = [metadata.EntryPoint("zeta", "hookpkg.other:own", loader.ENTRY_POINT_GROUP),
              metadata.EntryPoint("alpha", "hookpkg.other", loader.ENTRY_POINT_GROUP)]
    found = loader.load(["hookpkg.policy"], discover=lambda: points)
    assert names(found) == [("admit", "pkg.admit"), ("admit", "other.admit"), ("plan", "other.plan")]
    assert names(loader.load([], entry_points=False, discover=lambda: points)) == [("admit", "pkg.admit"),
                                                                                   ("admit", "other.admit")]


@pytest.mark.parametrize(("modules", "points", "error"), [
    (["hookpkg.missing"], [], r"^--hooks hookpkg.missing: cannot import hookpkg.missing: ModuleNotFoundError: "
                              r"No module named 'hookpkg.missing'$"),
    (["hookpkg.broken"], [], r"^--hooks hookpkg.broken: cannot import hookpkg.broken: RuntimeError: misconfigured$"),
    (["/nonexistent/policy.py"], [], r"cannot import /nonexistent/policy.py: ImportError: no such file"),
    (["hookpkg.policy:nope"], [], r"^--hooks hookpkg.policy:nope: hookpkg.policy has no attribute nope$"),
    (["hookpkg.policy:admit"], [], r"admit is a function, not a kopflet.hooks.Registry"),
    ([], [metadata.EntryPoint("acme", "hookpkg.broken", loader.ENTRY_POINT_GROUP)],
     r"^entry point acme = hookpkg.broken \(group kopflet.hooks\): cannot import hookpkg.broken: RuntimeError"),
])
def test_what_cannot_be_loaded_is_named(package: Path, modules: list[str], points: list[metadata.EntryPoint],
                                        error: str) -> None:
    with pytest.raises(loader.HookLoadError, match=error):
        loader.load(modules, discover=lambda: points)


def test_the_start_up_lines_say_how_each_hook_runs(package: Path) -> None:
    registry = hooks.Registry()
    registry.admit(name="strict", failure_policy="Fail")(lambda _: None)

    @registry.observe(name="watch", timeout=5)
    async def watch(_: hooks.DecisionView) -> None:
        pass

    assert loader.describe(registry.hooks) == [
        "policy hook strict: admit, in a thread, timeout 2s, failure policy Fail",
        "policy hook watch: observe, async, timeout 5s"]


def test_the_flag_checks_the_form_of_each_entry() -> None:
    from kopflet.config import settings
    cfg = settings.load(["--hooks=a.b,/etc/kopflet/p.py:reg", "--hooks=c", "--hook-entry-points=false"], {}, "h",
                        lambda _: "")
    assert cfg.hooks == ("a.b", "/etc/kopflet/p.py:reg", "c") and cfg.hook_entry_points is False
    defaults = settings.load([], {}, "h", lambda _: "")
    assert defaults.hooks == () and defaults.hook_entry_points is True
    for bad, why in (("a..b", "is not a module path"), ("p.py", "give a .py file as an absolute path")):
        with pytest.raises(settings.ConfigError, match=why):
            settings.load([f"--hooks={bad}"], {}, "h", lambda _: "")


def test_the_kopflet_command_refuses_a_hook_module_it_cannot_import(capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from handlers import cli
    monkeypatch.delenv("KOPFLET_ARGS", raising=False)
    monkeypatch.setenv("KUBECONFIG", "/nonexistent")
    assert cli.main(["--hooks=no_such_policy_module", "--hook-entry-points=false"]) == cli.USAGE_ERROR
    assert capsys.readouterr().err == textwrap.dedent("""\
        kopflet: --hooks no_such_policy_module: cannot import no_such_policy_module: ModuleNotFoundError: No module \
named 'no_such_policy_module'
        """)


def test_the_node_loads_the_hooks_and_hands_them_to_the_pod_workers(package: Path, tmp_path: Path) -> None:
    from kopflet.client.kubeapi import Credentials
    from kopflet.config.settings import AgentConfig
    from kopflet.node import Node, Runtime
    from tests.unit.test_node import HOST

    class Cri:
        """A connected CriClient's stand-in: the constructor only hands the event streams on."""

        def __getattr__(self, name: str) -> Any:
            if name in ("containerd_events", "container_events"):
                return object()
            raise AssertionError(f"Node() used the runtime ({name}) while building")

    def build(*modules: str) -> Node:
        cri = Cri()
        cfg = AgentConfig(node_name="n", root_dir=str(tmp_path), pod_log_root=str(tmp_path / "logs"),
                          node_ip="10.0.0.9", port=0, healthz_port=0, hooks=modules, hook_entry_points=False)
        return Node(cfg, credentials=Credentials(server="https://127.0.0.1:6443"),
                    runtime=Runtime(cri, cri, "containerd", "1.7.24", "v1"), host=HOST)  # type: ignore[arg-type]

    assert build().workers.hooks is None  # no hooks: the workers never ask
    node = build("hookpkg.policy:own")
    assert names(node.policy_hooks.hooks) == [("admit", "pkg.admit"), ("plan", "pkg.plan")]
    assert node.workers.hooks is node.policy_hooks
    with pytest.raises(loader.HookLoadError, match=r"hookpkg\.broken"):
        build("hookpkg.broken")
