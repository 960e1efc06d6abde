"""Where the pod cgroups are: cgroup names, the cgroupfs and systemd drivers' spellings of them, and the layout
``cgroupRoot`` / ``cgroupsPerQOS`` / ``cgroupDriver`` give the node's pod cgroups.

Mirrors, at Kubernetes v1.37.1, pkg/kubelet/cm:

- cgroup_manager_linux.go: `CgroupName` (a tuple of components), `NewCgroupName` (no ``/`` or ``_`` in a new
  component, so the systemd spelling can be undone), `ToCgroupfs`, `ParseCgroupfsToCgroupName`, `ToSystemd`
  (components joined with ``-``, ``-`` inside a component escaped as ``_``, ``.slice`` appended, then expanded into
  its cgroupfs path by opencontainers/cgroups v0.0.7 `systemd.ExpandSlice`), `ParseSystemdToCgroupName`,
  `IsSystemdStyleName`, and `cgroupCommon.Name` (the driver's literal cgroupfs path of a name);
- container_manager_linux.go NewContainerManager: with cgroupsPerQOS the node's pods live under
  ``<cgroupRoot>/kubepods`` (an empty root is ``/``); without it there is no such cgroup;
- helpers_linux.go `NodeAllocatableRoot`, `GetPodCgroupNameSuffix` (``pod<uid>``);
- qos_container_manager_linux.go: the QoS tiers ``<root>/burstable`` and ``<root>/besteffort`` (Guaranteed pods sit
  right under the root);
- pod_container_manager_linux.go `GetPodContainerName` (``<tier>/pod<uid>`` in the driver's spelling: the sandbox's
  CgroupParent) and `podContainerManagerNoop` (cgroupsPerQOS off: no pod cgroup, CgroupParent "", the runtime's
  default).

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from kopflet import gotext
from kopflet.api import qos, spec

DRIVER_CGROUPFS: Final = "cgroupfs"
DRIVER_SYSTEMD: Final = "systemd"
DRIVERS: Final = (DRIVER_CGROUPFS, DRIVER_SYSTEMD)
"""cgroupDriver's values (v1beta1 defaults it to cgroupfs)."""

NODE_ALLOCATABLE_CGROUP: Final = "kubepods"
"""upstream defaultNodeAllocatableCgroupName."""
POD_CGROUP_PREFIX: Final = "pod"
"""upstream podCgroupNamePrefix."""
SYSTEMD_SUFFIX: Final = ".slice"

CgroupName = tuple[str, ...]
"""upstream cm.CgroupName: the components from the root (``()`` is the root itself)."""

ROOT: Final[CgroupName] = ()


class CgroupNameError(ValueError):
    """A component that cannot be in a cgroup name, or a systemd slice name that does not expand."""


def new_cgroup_name(base: CgroupName, *components: str) -> CgroupName:
    """upstream NewCgroupName: `base` with `components` appended; ``/`` or ``_`` in one is refused (``_`` is how the
    systemd spelling escapes ``-``)."""
    for component in components:
        if "/" in component or "_" in component:
            raise CgroupNameError(f"invalid character in component [{gotext.go_quote(component)}] of CgroupName")
    return (*base, *components)


def parse_cgroupfs(name: str) -> CgroupName:
    """upstream ParseCgroupfsToCgroupName: ``/custom/kubepods`` is ("custom", "kubepods"); ``/`` and "" the root."""
    components = name.removeprefix("/").split("/")
    if components == [""]:
        return ROOT
    return tuple(components)


def to_cgroupfs(name: CgroupName) -> str:
    """upstream CgroupName.ToCgroupfs: ``"/" + path.Join(components...)`` (empty components dropped)."""
    return "/" + "/".join(part for part in name if part)


def expand_slice(slice_name: str) -> str:
    """opencontainers/cgroups systemd.ExpandSlice: ``a-b-c.slice`` is ``/a.slice/a-b.slice/a-b-c.slice``,
    ``-.slice`` the root ``/``. CgroupNameError for a name without ``.slice``, with ``/``, or with an empty
    component (``a--b.slice``, ``-a.slice``)."""
    if len(slice_name) < len(SYSTEMD_SUFFIX) or not slice_name.endswith(SYSTEMD_SUFFIX) or "/" in slice_name:
        raise CgroupNameError(f"invalid slice name: {slice_name}")
    stem = slice_name.removesuffix(SYSTEMD_SUFFIX)
    if stem == "-":
        return "/"
    path, prefix = "", ""
    for component in stem.split("-"):
        if not component:
            raise CgroupNameError(f"invalid slice name: {slice_name}")
        path += f"/{prefix}{component}{SYSTEMD_SUFFIX}"
        prefix += f"{component}-"
    return path


def to_systemd(name: CgroupName) -> str:
    """upstream CgroupName.ToSystemd: ("kubepods", "burstable", "pod12-ab") is
    ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_ab.slice``; the root is ``/``."""
    if not name or name == ("",):
        return "/"
    return expand_slice("-".join(part.replace("-", "_") for part in name) + SYSTEMD_SUFFIX)


def parse_systemd(name: str) -> CgroupName:
    """upstream ParseSystemdToCgroupName: the last slice of the path, ``-`` split, ``_`` back to ``-``."""
    base = name.rstrip("/").rsplit("/", 1)[-1] or "/"
    return tuple(part.replace("_", "-") for part in base.removesuffix(SYSTEMD_SUFFIX).split("-"))


def is_systemd_style_name(name: str) -> bool:
    """upstream IsSystemdStyleName."""
    return name.endswith(SYSTEMD_SUFFIX)


def node_allocatable_root(cgroup_root: str, cgroups_per_qos: bool, driver: str) -> str:
    """upstream NodeAllocatableRoot: the literal cgroupfs path of the pods' top cgroup."""
    return CgroupLayout(cgroup_root=cgroup_root, cgroups_per_qos=cgroups_per_qos, driver=driver).pods_root


@dataclasses.dataclass(frozen=True, kw_only=True)
class CgroupLayout:
    """Where the node's pod cgroups are, from ``cgroupRoot``, ``cgroupsPerQOS`` and the cgroup driver (the CRI
    runtime's when it says, else ``cgroupDriver``)."""

    cgroup_root: str = ""
    """``cgroupRoot`` as configured (cgroupfs form; "" is the root, ``/``)."""
    cgroups_per_qos: bool = True
    driver: str = DRIVER_CGROUPFS

    @property
    def systemd(self) -> bool:
        return self.driver == DRIVER_SYSTEMD

    def literal(self, name: CgroupName) -> str:
        """upstream cgroupCommon.Name: the cgroupfs path of `name` under this driver (systemd: the expanded
        slices)."""
        return to_systemd(name) if self.systemd else to_cgroupfs(name)

    @property
    def configured_root(self) -> CgroupName:
        """``cgroupRoot`` as a name (upstream ParseCgroupfsToCgroupName of it; "" is ``/``, the root)."""
        return parse_cgroupfs(self.cgroup_root)

    @property
    def root_name(self) -> CgroupName:
        """The pods' top cgroup (upstream containerManagerImpl.cgroupRoot): ``<cgroupRoot>/kubepods`` with
        cgroupsPerQOS, else cgroupRoot itself."""
        root = self.configured_root
        return new_cgroup_name(root, NODE_ALLOCATABLE_CGROUP) if self.cgroups_per_qos else root

    @property
    def pods_root(self) -> str:
        """`root_name` in the driver's spelling (upstream NodeAllocatableRoot, GetPodCgroupRoot): ``/kubepods``,
        ``/custom/kubepods``, ``/kubepods.slice``, ``/custom.slice/custom-kubepods.slice``."""
        return self.literal(self.root_name)

    def qos_name(self, qos_class: str) -> CgroupName:
        """The QoS tier's cgroup name (upstream GetQOSContainersInfo): Guaranteed is the root itself."""
        if qos_class == qos.GUARANTEED:
            return self.root_name
        return new_cgroup_name(self.root_name, qos_class.lower())

    def qos_cgroup(self, qos_class: str) -> str:
        """The QoS tier's cgroup in the driver's spelling."""
        return self.literal(self.qos_name(qos_class))

    def pod_cgroup(self, uid: str, qos_class: str) -> str:
        """The pod's cgroup in the driver's spelling (upstream GetPodContainerName's literal name): "" without
        cgroupsPerQOS (upstream podContainerManagerNoop), where the pod has none of its own."""
        if not self.cgroups_per_qos:
            return ""
        return self.literal(new_cgroup_name(self.qos_name(qos_class), f"{POD_CGROUP_PREFIX}{uid}"))

    def pod_cgroup_parent(self, pod: spec.Pod) -> str:
        """The sandbox's CgroupParent (upstream GetPodCgroupParent): the pod's cgroup by its QoS class."""
        return self.pod_cgroup(pod.uid, qos.qos_class(pod))

    def internal_name(self, literal: str) -> CgroupName:
        """upstream cgroupManager.CgroupName: a literal cgroupfs path back to a name (systemd slices decoded)."""
        if self.systemd:
            return parse_systemd(literal)
        return parse_cgroupfs(literal)

    def pod_uid(self, qos_literal: str, entry: str) -> str | None:
        """The pod UID of the directory `entry` under a QoS tier's literal path, None when it is not a pod's cgroup
        (upstream GetAllPodsFromCgroups: the last component split on ``pod`` into exactly two parts)."""
        base = self.internal_name(f"{qos_literal.rstrip('/')}/{entry}")[-1]
        if POD_CGROUP_PREFIX not in base:
            return None
        parts = base.split(POD_CGROUP_PREFIX)
        return parts[1] if len(parts) == 2 and parts[1] else None

    def pod_cgroup_candidates(self, uid: str) -> tuple[str, ...]:
        """Where a pod of unknown class may have its cgroup (Guaranteed, Burstable, BestEffort); none without
        cgroupsPerQOS."""
        if not self.cgroups_per_qos:
            return ()
        return tuple(self.pod_cgroup(uid, klass) for klass in (qos.GUARANTEED, qos.BURSTABLE, qos.BEST_EFFORT))


DEFAULT_LAYOUT: Final = CgroupLayout()
"""v1beta1's defaults: cgroupRoot "" (``/``), cgroupsPerQOS true, cgroupfs: pods under ``/kubepods``."""


def root_validation_error(name: CgroupName, missing: list[str]) -> str:
    """upstream NewContainerManager's error when cgroupRoot is missing in some hierarchy (cgroupV1impl.Validate,
    the name a Go string slice printed with %q)."""
    shown = "[" + " ".join(gotext.go_quote(part) for part in name) + "]"
    return f"invalid configuration: cgroup {shown} has some missing paths: {', '.join(missing)}"


def root_controllers_error(name: CgroupName, missing: list[str]) -> str:
    """The same on cgroup v2 (cgroupV2impl.Validate): controllers not enabled there, sorted."""
    shown = "[" + " ".join(gotext.go_quote(part) for part in name) + "]"
    return f"invalid configuration: cgroup {shown} has some missing controllers: {', '.join(sorted(missing))}"


def root_unreadable_error(name: CgroupName, error: str) -> str:
    """cgroupV2impl.Validate when the cgroup's cgroup.controllers cannot be read."""
    shown = "[" + " ".join(gotext.go_quote(part) for part in name) + "]"
    return f"invalid configuration: could not read controllers for cgroup {shown}: {error}"


SYSTEMD_NOT_RUNNING: Final = "systemd not running on this host, cannot use systemd cgroups manager"
"""opencontainers/cgroups manager.New's error for the systemd driver where /run/systemd/system is not a directory
(what upstream's container manager fails with on its first cgroup)."""


__all__ = [
    "DEFAULT_LAYOUT",
    "DRIVERS",
    "DRIVER_CGROUPFS",
    "DRIVER_SYSTEMD",
    "NODE_ALLOCATABLE_CGROUP",
    "POD_CGROUP_PREFIX",
    "ROOT",
    "SYSTEMD_NOT_RUNNING",
    "CgroupLayout",
    "CgroupName",
    "CgroupNameError",
    "expand_slice",
    "is_systemd_style_name",
    "new_cgroup_name",
    "node_allocatable_root",
    "parse_cgroupfs",
    "parse_systemd",
    "root_controllers_error",
    "root_unreadable_error",
    "root_validation_error",
    "to_cgroupfs",
    "to_systemd",
]
