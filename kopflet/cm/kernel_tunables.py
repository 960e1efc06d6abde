"""The kernel tunables the kubelet expects, and what to do about them at start (upstream
pkg/kubelet/cm/container_manager_linux.go setupKernelTunables, with component-helpers' node/util/sysctl).

Upstream's container manager checks six sysctls when it starts. With ``protectKernelDefaults`` (CIS 4.2.6 in the
benchmark's v1.8) a value that differs is an error, and the kubelet exits. Without it (the default) the kubelet writes
the expected value. A value that cannot be read is an error either way. Pure: `decide` gets the values as read (or
the error reading each gave) and returns the writes to make and the errors so far; `kopflet.cm.container_manager`
does the reading and writing under ``/proc/sys``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from kopflet import gotext

# The sysctls as upstream names them (paths under /proc/sys), with the values it wants, in its desiredState order.
VM_OVERCOMMIT_MEMORY = "vm/overcommit_memory"
VM_PANIC_ON_OOM = "vm/panic_on_oom"
KERNEL_PANIC = "kernel/panic"
KERNEL_PANIC_ON_OOPS = "kernel/panic_on_oops"
ROOT_MAX_KEYS = "kernel/keys/root_maxkeys"
ROOT_MAX_BYTES = "kernel/keys/root_maxbytes"

ROOT_MAX_KEYS_SETTING = 1000000
"""upstream RootMaxKeysSetting: the keys root may own (a key per container, once docker's need)."""

DESIRED: tuple[tuple[str, int], ...] = (
    (VM_OVERCOMMIT_MEMORY, 1),  # VMOvercommitMemoryAlways: no overcommit heuristics
    (VM_PANIC_ON_OOM, 0),  # VMPanicOnOOMInvokeOOMKiller: the OOM killer, not a panic
    (KERNEL_PANIC, 10),  # KernelPanicRebootTimeout: reboot 10 s after a panic
    (KERNEL_PANIC_ON_OOPS, 1),  # KernelPanicOnOopsAlways
    (ROOT_MAX_KEYS, ROOT_MAX_KEYS_SETTING),
    (ROOT_MAX_BYTES, ROOT_MAX_KEYS_SETTING * 25),  # RootMaxBytesSetting: 25 bytes a key
)

_INT64_MAX = 2**63 - 1
_DECIMAL = re.compile(r"[+-]?[0-9]+")


def parse_value(text: str) -> int | str:
    """A sysctl file's content as upstream's GetSysctl reads it (``strconv.Atoi`` of it trimmed of spaces and
    newlines): the number, or the error text."""
    trimmed = text.strip(" \n")
    if not _DECIMAL.fullmatch(trimmed):
        return f"strconv.Atoi: parsing {gotext.go_quote(trimmed)}: invalid syntax"
    value = int(trimmed)
    if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        return f"strconv.Atoi: parsing {gotext.go_quote(trimmed)}: value out of range"
    return value


def display_name(sysctl: str) -> str:
    """``vm/overcommit_memory`` as ``sysctl`` names it: ``vm.overcommit_memory``."""
    return sysctl.replace("/", ".")


@dataclasses.dataclass(frozen=True)
class Decision:
    """What start-up does to the kernel tunables: `writes` (sysctl, value) in order, and the `errors` already known
    (those of reading, or with `protect`, each value that differs)."""

    writes: tuple[tuple[str, int], ...] = ()
    errors: tuple[str, ...] = ()


def invalid_flag_message(sysctl: str, expected: int, actual: int) -> str:
    """upstream's KernelTunableError message for a value that differs."""
    return f"invalid kernel flag: {sysctl}, expected value: {expected}, actual value: {actual}"


def decide(current: Mapping[str, int | str], protect: bool) -> Decision:
    """upstream setupKernelTunables: for each of DESIRED, `current`'s value (or the error text reading it gave,
    kept as an error in either mode); one that differs is an error with `protect` (``KernelTunableError``),
    else a write of the expected value (``KernelTunableModify``)."""
    writes: list[tuple[str, int]] = []
    errors: list[str] = []
    for sysctl, expected in DESIRED:
        value = current[sysctl]
        if isinstance(value, str):
            errors.append(value)
        elif value == expected:
            continue
        elif protect:
            errors.append(invalid_flag_message(sysctl, expected, value))
        else:
            writes.append((sysctl, expected))
    return Decision(tuple(writes), tuple(errors))


def aggregate(errors: Sequence[str]) -> str:
    """utilerrors.NewAggregate(errs).Error(): one error's text, or several in brackets (repeats once)."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


__all__ = ["DESIRED", "Decision", "aggregate", "decide", "display_name", "invalid_flag_message", "parse_value"]
