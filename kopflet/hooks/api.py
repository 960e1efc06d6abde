"""
Policy hooks, the public API: what a module loaded with ``--hooks`` imports (``from kopflet import hooks``).

No kubelet can be extended without a fork; kopflet runs the user's Python at three points of a pod's life:

- ``@hooks.admit``: once per pod, when the agent admits it, after the built-in admit handlers (upstream's
  ``canAdmitPod`` chain). Return None (or `allow()`) to let it run, `reject(message, reason=...)` to refuse it:
  the pod ends Failed with that reason and ``Pod was rejected: <message>``, never retried, as an upstream rejection.
- ``@hooks.plan``: when a sync is about to start something (the sandbox or containers). The hook gets a `PlanView`
  and may hold the starts back (`PlanView.delay`), set environment variables, add emptyDir or hostPath volumes and
  mount them into the containers that start. The pod in the API is not changed: the edits apply to what this sync
  starts, so a hook that wants them on every start makes them every time it is called.
- ``@hooks.observe``: after every decision and its steps, with a read-only `DecisionView` (the summary ``kopflet
  explain`` shows, and the pod's start timeline). Observers run apart from the pod's sync, in the order the decisions
  were made.

A hook is a plain function (run in a thread of its own: it may block) or a coroutine function (run on the agent's
event loop: it must not block). Each call has a time limit (``timeout``, 2 s by default). A hook that raises, times
out or returns the wrong type is reported on the pod as a Warning event ``HookFailed`` and the agent carries on with
the decision it would have made without the hook (an admit hook registered with ``failure_policy="Fail"`` rejects
the pod instead, as a Kubernetes admission webhook with ``failurePolicy: Fail``).

Everything a hook is given is the agent's own data: read it, never change it in place.

Pure: data types, validation and the registry; `kopflet.hooks.loader` imports the modules and
`kopflet.hooks.runner` calls the hooks.
"""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from kopflet.api import spec, validation
from kopflet.api.events import NORMAL, WARNING

if TYPE_CHECKING:
    from kopflet.pods.explain import Decision
    from kopflet.pods.timeline import Timeline

ADMIT, PLAN, OBSERVE = "admit", "plan", "observe"
KINDS = (ADMIT, PLAN, OBSERVE)
IGNORE, FAIL = "Ignore", "Fail"
"""An admit hook's failure policy (the words of an admission webhook's ``failurePolicy``)."""

DEFAULT_TIMEOUT = 2.0
MAX_TIMEOUT = 60.0
"""Seconds; an admit or plan hook holds its pod's sync that long at most."""
MAX_DELAY = 600.0
"""The longest `PlanView.delay`, in seconds: the hook is asked again after it."""
DEFAULT_REASON = "HookRejected"
"""The status reason of a pod an admit hook rejects without naming one."""
HOOK_FAILED = "HookFailed"
"""The Warning event's reason when a hook fails (and the status reason when a ``Fail`` admit hook does)."""
MAX_MESSAGE = 1024
"""Messages are cut at this many characters (upstream's event message limit)."""
MAX_EVENTS = 5
"""Events one hook call may post."""
HOST_PATH_TYPES = ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice",
                   "BlockDevice")
EMPTY_DIR_MEDIUMS = ("", "Memory")

_REASON = re.compile(r"^[A-Z][A-Za-z0-9]{0,127}$")
"""A reason is CamelCase (the API's convention for status and event reasons)."""


def _reason(reason: str) -> str:
    if not isinstance(reason, str) or not _REASON.match(reason):
        raise ValueError(f"reason {reason!r} must be CamelCase: a capital letter, then letters and digits "
                         f"(at most 128)")
    return reason


def truncate(message: str) -> str:
    """`message`, cut to `MAX_MESSAGE` characters."""
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 3] + "..."


def _message(message: str) -> str:
    if not isinstance(message, str) or not message.strip():
        raise ValueError("the message must be a non-empty string")
    return truncate(message)


@dataclasses.dataclass(frozen=True)
class HookEvent:
    """An event a hook posts on its pod."""

    type: str
    reason: str
    message: str

    @classmethod
    def checked(cls, type_: str, reason: str, message: str) -> HookEvent:
        if type_ not in (NORMAL, WARNING):
            raise ValueError(f"event type {type_!r} must be {NORMAL!r} or {WARNING!r}")
        return cls(type_, _reason(reason), _message(message))


class _Events:
    """What a view lets its hook post (a few events per call)."""

    _events: list[HookEvent]
    _sealed: bool

    def __init__(self) -> None:
        # object.__setattr__: the frozen dataclass views call this too
        object.__setattr__(self, "_events", [])
        object.__setattr__(self, "_sealed", False)

    def event(self, type_: str, reason: str, message: str) -> None:
        """Post an event on the pod (type ``Normal`` or ``Warning``, a CamelCase reason), once the hook returns."""
        self._check_open()
        if len(self._events) >= MAX_EVENTS:
            raise ValueError(f"a hook call may post at most {MAX_EVENTS} events")
        self._events.append(HookEvent.checked(type_, reason, message))

    @property
    def events(self) -> tuple[HookEvent, ...]:
        return tuple(self._events)

    def seal(self) -> None:
        """The call is over (returned or abandoned): later changes are refused."""
        object.__setattr__(self, "_sealed", True)

    def _check_open(self) -> None:
        if self._sealed:
            raise RuntimeError("this view belongs to a hook call that is over")


# ------------------------------------------------------------------------------------------------------- admit


@dataclasses.dataclass(frozen=True)
class AdmitVerdict:
    """An admit hook's answer; build it with `allow()` or `reject()`."""

    allowed: bool
    reason: str = ""
    """The pod's ``status.reason`` and the Warning event's reason when rejected."""
    message: str = ""
    """Why, without upstream's ``Pod was rejected: `` prefix (the status message gets it)."""


def allow() -> AdmitVerdict:
    """Let the pod run (returning None says the same)."""
    return AdmitVerdict(allowed=True)


def reject(message: str, *, reason: str = DEFAULT_REASON) -> AdmitVerdict:
    """Refuse the pod: it ends Failed with `reason` and ``Pod was rejected: <message>``, never retried."""
    return AdmitVerdict(allowed=False, reason=_reason(reason), message=_message(message))


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdmitRequest(_Events):
    """A pod about to be admitted on this node."""

    pod: spec.Pod
    """The pod (`kopflet.api.spec.Pod`: ``pod.spec.containers[0].image``, ``pod.labels``, ``pod.spec.raw`` ...)."""
    node_name: str
    others: tuple[spec.Pod, ...] = ()
    """The pods already admitted on the node that still hold it (not terminal, not deleted)."""
    now: datetime.datetime

    def __post_init__(self) -> None:
        _Events.__init__(self)

    def images(self) -> tuple[tuple[str, str], ...]:
        """(container name, image) of every init, regular and ephemeral container, in spec order."""
        return tuple((c.name, c.image) for c in _all_containers(self.pod))


# -------------------------------------------------------------------------------------------------------- plan


@dataclasses.dataclass(frozen=True)
class EnvChange:
    containers: tuple[str, ...]
    name: str
    value: str


@dataclasses.dataclass(frozen=True)
class MountChange:
    containers: tuple[str, ...]
    mount: Mapping[str, Any]
    """A ``volumeMounts`` entry (name, mountPath, readOnly, subPath)."""


@dataclasses.dataclass(frozen=True)
class Rewrite:
    """The changes one plan hook asked for."""

    delay: float | None = None
    """Hold this sync's starts back and ask again after this many seconds (None: start now)."""
    delay_reason: str = ""
    env: tuple[EnvChange, ...] = ()
    volumes: tuple[Mapping[str, Any], ...] = ()
    """Pod ``volumes`` entries to add (emptyDir or hostPath)."""
    mounts: tuple[MountChange, ...] = ()
    events: tuple[HookEvent, ...] = ()

    def describe(self) -> list[tuple[str, str]]:
        """(action, reason) for each change, as ``kopflet explain`` lists them."""
        out = []
        if self.delay is not None:
            out.append((f"delay the starts by {self.delay:g}s", self.delay_reason))
        for env in self.env:
            out.append((f"set env {env.name}", f"in {', '.join(env.containers)}"))
        for volume in self.volumes:
            kind = "emptyDir" if "emptyDir" in volume else "hostPath " + str(volume["hostPath"]["path"])
            out.append((f"add volume {volume['name']}", kind))
        for mount in self.mounts:
            out.append((f"mount {mount.mount['name']} at {mount.mount['mountPath']}",
                        f"in {', '.join(mount.containers)}"))
        return out


class PlanView(_Events):
    """What one sync is about to start, and the changes a plan hook asks for. Read-only attributes; the methods
    record changes, checked at once (a wrong one raises ValueError inside the hook, which then counts as failed and
    none of its changes apply)."""

    def __init__(self, *, pod: spec.Pod, node_name: str, creates_sandbox: bool, starts: Iterable[str],
                 restarts: Iterable[str] = (), now: datetime.datetime,
                 first_seen: datetime.datetime | None = None) -> None:
        super().__init__()
        self._pod, self._node_name, self._creates_sandbox = pod, node_name, creates_sandbox
        self._starts, self._restarts = tuple(starts), tuple(restarts)
        self._now, self._first_seen = now, first_seen if first_seen is not None else now
        self._delay: tuple[float, str] | None = None
        self._env: list[EnvChange] = []
        self._volumes: list[Mapping[str, Any]] = []
        self._mounts: list[MountChange] = []

    @property
    def pod(self) -> spec.Pod:
        return self._pod

    @property
    def node_name(self) -> str:
        return self._node_name

    @property
    def creates_sandbox(self) -> bool:
        """The sync creates the pod's sandbox (its first start, or a re-creation)."""
        return self._creates_sandbox

    @property
    def starts(self) -> tuple[str, ...]:
        """The containers this sync starts, in order (ephemeral, init, regular)."""
        return self._starts

    @property
    def restarts(self) -> tuple[str, ...]:
        """Those of `starts` that ran before (a restart)."""
        return self._restarts

    @property
    def now(self) -> datetime.datetime:
        return self._now

    @property
    def first_seen(self) -> datetime.datetime:
        """When the agent first saw the pod (for a delay counted from its arrival)."""
        return self._first_seen

    def delay(self, seconds: float, reason: str) -> None:
        """Start nothing in this sync; the pod is looked at again after `seconds` (at most `MAX_DELAY`), or sooner
        when something about it changes, and the hook is asked again. What must stop still stops."""
        self._check_open()
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds <= MAX_DELAY:
            raise ValueError(f"delay: {seconds!r} must be a number of seconds above 0 and at most {MAX_DELAY:g}")
        self._delay = (float(seconds), _message(reason))

    def set_env(self, name: str, value: str, *, containers: Iterable[str] | None = None) -> None:
        """Set an environment variable (replacing one of that name) in `containers` (default: all of the pod's)."""
        self._check_open()
        if not isinstance(name, str) or not name or "=" in name or not all(" " <= ch <= "~" for ch in name):
            raise ValueError(f"set_env: {name!r} is not a valid name: printable ASCII characters other than '='")
        if not isinstance(value, str):
            raise ValueError(f"set_env: the value of {name} must be a string, not {type(value).__name__}")
        self._env.append(EnvChange(self._containers(containers), name, value))

    def add_empty_dir(self, name: str, *, medium: Literal["", "Memory"] = "", size_limit: str = "") -> None:
        """Add an emptyDir volume to the pod (mount it with `mount`); it lives as long as the pod on this node."""
        self._check_open()
        if medium not in EMPTY_DIR_MEDIUMS:
            raise ValueError(f"add_empty_dir: medium {medium!r} must be one of {EMPTY_DIR_MEDIUMS}")
        source: dict[str, Any] = {**({"medium": medium} if medium else {}),
                                  **({"sizeLimit": size_limit} if size_limit else {})}
        self._add_volume({"name": self._new_volume(name), "emptyDir": source})

    def add_host_path(self, name: str, path: str, *, type: str = "") -> None:
        """Add a hostPath volume to the pod (mount it with `mount`): `path` on the node, of that hostPath type."""
        self._check_open()
        if not isinstance(path, str) or not path.startswith("/"):
            raise ValueError(f"add_host_path: {path!r} must be an absolute path")
        if type not in HOST_PATH_TYPES:
            raise ValueError(f"add_host_path: type {type!r} must be one of {HOST_PATH_TYPES}")
        self._add_volume({"name": self._new_volume(name), "hostPath": {"path": path, **({"type": type} if type
                                                                                       else {})}})

    def mount(self, volume: str, mount_path: str, *, containers: Iterable[str] | None = None,
              read_only: bool = False, sub_path: str = "") -> None:
        """Mount a volume of the pod (its own, or one this hook added) at `mount_path` in `containers` (default:
        all of the pod's)."""
        self._check_open()
        known = {str(v.get("name")) for v in self._pod.spec.volumes} | {str(v["name"]) for v in self._volumes}
        if volume not in known:
            raise ValueError(f"mount: the pod has no volume {volume!r} (add it first)")
        if not isinstance(mount_path, str) or not mount_path.startswith("/"):
            raise ValueError(f"mount: {mount_path!r} must be an absolute path")
        if sub_path and (sub_path.startswith("/") or ".." in sub_path.split("/")):
            raise ValueError(f"mount: subPath {sub_path!r} must be relative and must not contain '..'")
        names = self._containers(containers)
        for name in names:
            container = self._pod.spec.container(name)
            taken = {m.get("mountPath") for m in container.volume_mounts} if container is not None else set()
            taken |= {m.mount["mountPath"] for m in self._mounts if name in m.containers}
            if mount_path in taken:
                raise ValueError(f"mount: container {name} already mounts something at {mount_path}")
        mount = {"name": volume, "mountPath": mount_path, **({"readOnly": True} if read_only else {}),
                 **({"subPath": sub_path} if sub_path else {})}
        self._mounts.append(MountChange(names, mount))

    def changes(self) -> Rewrite:
        """What the hook asked for."""
        delay, why = self._delay if self._delay is not None else (None, "")
        return Rewrite(delay=delay, delay_reason=why, env=tuple(self._env), volumes=tuple(self._volumes),
                       mounts=tuple(self._mounts), events=self.events)

    def _containers(self, names: Iterable[str] | None) -> tuple[str, ...]:
        if names is None:
            return tuple(c.name for c in _all_containers(self._pod))
        if isinstance(names, str):
            raise ValueError(f"containers: give a list of names, not the string {names!r}")
        chosen = tuple(names)
        unknown = [n for n in chosen if self._pod.spec.container(n) is None]
        if unknown or not chosen:
            raise ValueError(f"containers: the pod has no container {unknown[0]!r}" if unknown
                             else "containers: name at least one")
        return chosen

    def _new_volume(self, name: str) -> str:
        if not isinstance(name, str) or not validation.is_dns1123_label(name):
            raise ValueError(f"volume name {name!r} must be a DNS-1123 label")
        if any(v.get("name") == name for v in (*self._pod.spec.volumes, *self._volumes)):
            raise ValueError(f"the pod already has a volume {name!r}")
        return name

    def _add_volume(self, volume: Mapping[str, Any]) -> None:
        self._volumes.append(volume)


# ----------------------------------------------------------------------------------------------------- observe


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecisionView(_Events):
    """One decision of a pod's worker, after it was made."""

    pod: spec.Pod
    """The pod the decision is about (a minimal one, name and uid only, when its spec could not be read or it is
    gone)."""
    decision: Decision
    """The summary ``kopflet explain`` shows (`kopflet.pods.explain.Decision`: lifecycle, phase, rules, waits,
    events, next)."""
    status: Mapping[str, Any] | None = None
    """The pod status this decision writes (None: none this time)."""
    started: bool = False
    """The pod has just started: every regular container runs (when upstream observes its start latency)."""
    first_seen: datetime.datetime
    """When the agent first saw the pod."""
    timeline: Timeline | None = None
    """The pod's last start as the agent timed it (`kopflet.pods.timeline.Timeline`: its steps, each image pull,
    container create and start), as this decision's steps left it: `finished` once the start is over (`outcome`
    Ready, or the phase the pod ended in first). None when no start was timed (a pod adopted running)."""

    def __post_init__(self) -> None:
        _Events.__init__(self)


# ---------------------------------------------------------------------------------------------------- registry

AdmitHook = Callable[[AdmitRequest], AdmitVerdict | Awaitable[AdmitVerdict | None] | None]
PlanHook = Callable[[PlanView], Awaitable[None] | None]
ObserveHook = Callable[[DecisionView], Awaitable[None] | None]
F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class Hook:
    """A registered hook."""

    kind: str
    name: str
    """``module.function`` unless given: what events and logs call it."""
    fn: Callable[[Any], Any]
    timeout: float = DEFAULT_TIMEOUT
    failure_policy: str = IGNORE

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


class Registry:
    """Hooks in the order they were registered. The module-level decorators register into `registry`, the one
    the agent reads; a module may also make its own and name it in its entry point."""

    def __init__(self) -> None:
        self._hooks: list[Hook] = []

    @property
    def hooks(self) -> tuple[Hook, ...]:
        return tuple(self._hooks)

    def register(self, hook: Hook) -> Hook:
        if hook.kind not in KINDS:
            raise ValueError(f"hook kind {hook.kind!r} must be one of {KINDS}")
        if not callable(hook.fn):
            raise TypeError(f"hook {hook.name}: {hook.fn!r} is not callable")
        if isinstance(hook.timeout, bool) or not isinstance(hook.timeout, int | float) or \
                not 0 < hook.timeout <= MAX_TIMEOUT:
            raise ValueError(f"hook {hook.name}: timeout {hook.timeout!r} must be above 0 and at most {MAX_TIMEOUT:g}")
        if hook.failure_policy not in (IGNORE, FAIL) or (hook.kind != ADMIT and hook.failure_policy != IGNORE):
            raise ValueError(f"hook {hook.name}: failure_policy {hook.failure_policy!r}: admit hooks take "
                             f"{IGNORE!r} or {FAIL!r}, the others only {IGNORE!r}")
        if not any(h.fn is hook.fn and h.kind == hook.kind for h in self._hooks):  # a module imported twice
            self._hooks.append(hook)
        return hook

    def _decorator(self, kind: str, fn: F | None, name: str | None, timeout: float,
                   failure_policy: str) -> F | Callable[[F], F]:
        def add(f: F) -> F:
            self.register(Hook(kind, name or f"{f.__module__}.{f.__qualname__}", f, timeout, failure_policy))
            return f
        return add(fn) if fn is not None else add

    @overload
    def admit(self, fn: F, /) -> F: ...
    @overload
    def admit(self, fn: None = None, /, *, name: str | None = None, timeout: float = DEFAULT_TIMEOUT,
              failure_policy: Literal["Ignore", "Fail"] = "Ignore") -> Callable[[F], F]: ...

    def admit(self, fn: F | None = None, /, *, name: str | None = None, timeout: float = DEFAULT_TIMEOUT,
              failure_policy: Literal["Ignore", "Fail"] = "Ignore") -> F | Callable[[F], F]:
        """Register an admit hook: ``(AdmitRequest) -> AdmitVerdict | None``."""
        return self._decorator(ADMIT, fn, name, timeout, failure_policy)

    @overload
    def plan(self, fn: F, /) -> F: ...
    @overload
    def plan(self, fn: None = None, /, *, name: str | None = None,
             timeout: float = DEFAULT_TIMEOUT) -> Callable[[F], F]: ...

    def plan(self, fn: F | None = None, /, *, name: str | None = None,
             timeout: float = DEFAULT_TIMEOUT) -> F | Callable[[F], F]:
        """Register a plan hook: ``(PlanView) -> None``."""
        return self._decorator(PLAN, fn, name, timeout, IGNORE)

    @overload
    def observe(self, fn: F, /) -> F: ...
    @overload
    def observe(self, fn: None = None, /, *, name: str | None = None,
                timeout: float = DEFAULT_TIMEOUT) -> Callable[[F], F]: ...

    def observe(self, fn: F | None = None, /, *, name: str | None = None,
                timeout: float = DEFAULT_TIMEOUT) -> F | Callable[[F], F]:
        """Register an observe hook: ``(DecisionView) -> None``."""
        return self._decorator(OBSERVE, fn, name, timeout, IGNORE)


registry = Registry()
"""The registry the module-level decorators fill and the agent reads."""
admit = registry.admit
plan = registry.plan
observe = registry.observe


def _all_containers(pod: spec.Pod) -> tuple[spec.ContainerSpec, ...]:
    return (*pod.spec.init_containers, *pod.spec.containers, *pod.spec.ephemeral_containers)
