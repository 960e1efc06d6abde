"""Load the policy hooks at start: the ``--hooks`` modules in order, then the installed packages' entry points of
group ``kopflet.hooks`` by name (unless ``--hook-entry-points=false``).

A ``--hooks`` entry is ``package.module`` (importing it runs its ``@hooks.admit``/``plan``/``observe`` decorators,
which register into `kopflet.hooks.registry`), ``package.module:attribute`` (a `kopflet.hooks.Registry` of its own)
or ``/path/to/file.py`` (imported as a module named ``kopflet_hooks_<file name>``, with ``:attribute`` likewise). An
entry point's value has the same form. Anything that cannot be loaded is a `HookLoadError` naming it: the agent
does not start with a policy missing. Loading twice loads nothing twice (Python keeps imported modules).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from kopflet.hooks import api

ENTRY_POINT_GROUP = "kopflet.hooks"
FILE_MODULE_PREFIX = "kopflet_hooks_"


class HookLoadError(Exception):
    """A hook module or entry point could not be loaded; the message names it."""


def load(modules: Sequence[str], *, entry_points: bool = True, registry: api.Registry | None = None,
         discover: Callable[[], Iterable[metadata.EntryPoint]] | None = None) -> tuple[api.Hook, ...]:
    """The hooks of `modules` and (with `entry_points`) of the entry points `discover` finds (the installed
    packages' by default): the default registry's, then those of named registries, each once."""
    registry = registry if registry is not None else api.registry
    named: list[api.Hook] = []
    for value in modules:
        named += _load(value, f"--hooks {value}")
    if entry_points:
        found = discover() if discover is not None else metadata.entry_points(group=ENTRY_POINT_GROUP)
        for point in sorted(found, key=lambda p: p.name):
            named += _load(point.value, f"entry point {point.name} = {point.value} (group {ENTRY_POINT_GROUP})")
    out: list[api.Hook] = []
    for hook in (*registry.hooks, *named):
        if not any(h.fn is hook.fn and h.kind == hook.kind for h in out):
            out.append(hook)
    return tuple(out)


def describe(hooks: Sequence[api.Hook]) -> list[str]:
    """One line per hook, for the start-up log."""
    return [f"policy hook {h.name}: {h.kind}, {'async' if h.is_async else 'in a thread'}, timeout {h.timeout:g}s"
            + (f", failure policy {h.failure_policy}" if h.kind == api.ADMIT else "") for h in hooks]


def _load(value: str, where: str) -> list[api.Hook]:
    target, _, attribute = value.partition(":")
    try:
        module = _import_file(target) if target.endswith(".py") else importlib.import_module(target)
    except (Exception, SystemExit) as exc:  # an import error, or anything the module's own code raised
        raise HookLoadError(f"{where}: cannot import {target}: {type(exc).__name__}: {exc}") from exc
    if not attribute:
        return []
    obj: Any = module
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise HookLoadError(f"{where}: {target} has no attribute {attribute}")
        obj = getattr(obj, part)
    if isinstance(obj, ModuleType):
        return []  # a submodule: its decorators registered as it was imported
    if not isinstance(obj, api.Registry):
        raise HookLoadError(f"{where}: {attribute} is a {type(obj).__name__}, not a kopflet.hooks.Registry (name a "
                            f"module whose decorators register its hooks, or a Registry)")
    return list(obj.hooks)


def _import_file(path: str) -> ModuleType:
    """A .py file as a module of its own name (``kopflet_hooks_<stem>``), once."""
    file = Path(path)
    name = FILE_MODULE_PREFIX + re.sub(r"\W", "_", file.stem)
    loaded = sys.modules.get(name)
    if loaded is not None:
        if Path(getattr(loaded, "__file__", "") or "") == file:
            return loaded
        raise ImportError(f"another file is already loaded as module {name}")
    if not file.is_file():
        raise ImportError("no such file")
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError("not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
