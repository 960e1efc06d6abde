"""``featureGates`` / ``--feature-gates``: the gates kopflet implements, the ones it takes as no-ops, and a clear
refusal of every other value.

Upstream's kubelet takes any gate its registry knows (cmd/kubelet/app/server.go: ``SetFromMap`` of the flags' gates,
then of the file's merged with them) and refuses an unknown name with ``unrecognized feature gate: X``. kopflet
implements three gates both ways: ``QOSReserved`` (alpha, off by default at v1.37.1: the QoS tiers' memory limits of
``qosReserved``), and component-base's ``LoggingAlphaOptions`` (alpha, off: the logging formats' splitStream and
infoBufferSize) and ``LoggingBetaOptions`` (beta, on: the json format), which `kopflet.config.log_options` checks as
logsapi.Validate does; and the behaviour of ``SystemdWatchdog`` (GA and locked on: the systemd watchdog,
`kopflet.watchdog`), whose gate upstream no longer reads; that one is taken at true only, and is no no-op. So are
``GracefulNodeShutdown`` and ``GracefulNodeShutdownBasedOnPodPriority`` (beta, on: `kopflet.nodeshutdown`), whose
off behaviour kopflet does not implement. Any other gate upstream knows it takes only at upstream v1.37.1's default,
as a no-op (kopflet behaves as upstream does with the gate at its default; a kubelet config copied from a node that
spells out defaults keeps working), and names it in an INFO line at start. Set to the other value it stops the agent
rather than being ignored: in upstream's words for a gate locked to its default (``cannot set feature gate X to v,
feature is locked to d``), else saying kopflet does not implement the gate's non-default behaviour. A name upstream
does not know either gets upstream's message. `upstream_feature_gates` lists v1.37.1's registry with the defaults.

Pure: the flag's text and the file's mapping in, the gates or an error message out.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from kopflet.config.log_options import LOGGING_ALPHA_OPTIONS, LOGGING_BETA_OPTIONS
from kopflet.config.upstream_feature_gates import (
    EMULATION_VERSION,
    LOCKED_TO_DEFAULT,
    PRE_ALPHA,
    UPSTREAM_FEATURE_GATES,
)

QOS_RESERVED: Final = "QOSReserved"
"""pkg/features QOSReserved: alpha since 1.11, default false."""

IMPLEMENTED: Mapping[str, bool] = MappingProxyType({
    LOGGING_ALPHA_OPTIONS: False,  # component-base logs/api/v1: alpha since 1.24, default false
    LOGGING_BETA_OPTIONS: True,  # beta since 1.24, default true
    QOS_RESERVED: False,
})
"""The gates kopflet implements, with their upstream default at v1.37.1."""
SYSTEMD_WATCHDOG: Final = "SystemdWatchdog"
"""pkg/features SystemdWatchdog: beta on in 1.32, GA and locked to true since 1.35 (upstream's watchdog runs
without reading it)."""
NODE_LOG_QUERY: Final = "NodeLogQuery"
"""pkg/features NodeLogQuery: GA and locked to true since 1.36 (the node log query, with enableSystemLogQuery)."""
IMPLEMENTED_LOCKED: frozenset[str] = frozenset({SYSTEMD_WATCHDOG, NODE_LOG_QUERY})
"""Gates locked to their v1.37.1 default whose behaviour at that default kopflet implements: taken at the default
(not a no-op), refused otherwise in upstream's words for a locked gate."""
GRACEFUL_NODE_SHUTDOWN: Final = "GracefulNodeShutdown"
"""pkg/features GracefulNodeShutdown: beta on since 1.21 (the node shutdown manager, `kopflet.nodeshutdown`)."""
GRACEFUL_NODE_SHUTDOWN_BASED_ON_POD_PRIORITY: Final = "GracefulNodeShutdownBasedOnPodPriority"
"""pkg/features GracefulNodeShutdownBasedOnPodPriority: beta on since 1.24 (shutdownGracePeriodByPodPriority)."""
IMPLEMENTED_AT_DEFAULT: frozenset[str] = frozenset({
    GRACEFUL_NODE_SHUTDOWN, GRACEFUL_NODE_SHUTDOWN_BASED_ON_POD_PRIORITY})
"""Gates whose behaviour at their v1.37.1 default kopflet implements, but not the other value: taken at the default
(not a no-op), refused otherwise as a gate kopflet does not implement. (GracefulNodeShutdown off would also need
WindowsGracefulNodeShutdown and GracefulNodeShutdownBasedOnPodPriority off, upstream's gate dependencies.)"""

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class FeatureGateError(ValueError):
    """A gate kopflet cannot take, worded as upstream's errors where upstream has one."""


def parse_bool(text: str) -> bool:
    """Go's strconv.ParseBool; FeatureGateError with its error text otherwise."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise FeatureGateError(f'strconv.ParseBool: parsing "{text}": invalid syntax')


def parse_flag(text: str) -> dict[str, bool]:
    """One ``--feature-gates`` value, as upstream's MapStringBool flag reads it: ``Name=bool`` pairs split on
    commas, empty pairs skipped, names and values trimmed; upstream's error texts."""
    gates: dict[str, bool] = {}
    for pair in text.split(","):
        if not pair:
            continue
        name, eq, value = pair.partition("=")
        if not eq:
            raise FeatureGateError("malformed pair, expect string=bool")
        name, value = name.strip(), value.strip()
        try:
            gates[name] = parse_bool(value)
        except FeatureGateError as exc:
            raise FeatureGateError(f"invalid value of {name}: {value}, err: {exc}") from None
    return gates


def _go_bool(value: bool) -> str:
    return str(value).lower()


def problems(gates: Mapping[str, bool]) -> list[str]:
    """Why `gates` cannot be set, one message per gate kopflet cannot take, in name order: upstream's
    ``unrecognized feature gate: X`` for a name its registry lacks too; for a gate it knows set to other than its
    v1.37.1 default, upstream's lock message for a gate locked to its default (component-base featuregate
    unsafeSetFromMap), else kopflet's refusal. A gate at its default is no problem (`no_ops`)."""
    errors = []
    for name in sorted(gates):
        value = gates[name]
        if name in IMPLEMENTED:
            continue
        if name not in UPSTREAM_FEATURE_GATES:
            errors.append(f"unrecognized feature gate: {name}")
            continue
        default = UPSTREAM_FEATURE_GATES[name]
        if name in PRE_ALPHA:  # upstream refuses either value of a gate not yet introduced at its version
            major, minor = EMULATION_VERSION.split(".")
            errors.append(f"cannot set feature gate {name} to {_go_bool(value)}, feature is PreAlpha at emulated "
                          f"version {EMULATION_VERSION}, min compatibility version {major}.{int(minor) - 1}")
        elif value == default:
            continue
        elif name in LOCKED_TO_DEFAULT:
            errors.append(f"cannot set feature gate {name} to {_go_bool(value)}, feature is locked to "
                          f"{_go_bool(default)}")
        else:
            *others, last = sorted(IMPLEMENTED)
            implemented = f"{', '.join(others)} and {last}" if others else last
            errors.append(f"cannot set feature gate {name} to {_go_bool(value)}, kopflet does not implement it "
                          f"(it takes {name} only at upstream's default, {_go_bool(default)}; the only feature "
                          f"gates it implements both ways are {implemented})")
    return errors


def no_ops(gates: Mapping[str, bool]) -> list[str]:
    """The gates of `gates` kopflet takes without doing anything: known upstream, not implemented here, and set
    to their upstream default (so kopflet behaves as upstream does with them), in name order."""
    return [name for name in sorted(gates) if name not in IMPLEMENTED and name not in IMPLEMENTED_LOCKED
            and name not in IMPLEMENTED_AT_DEFAULT and name not in PRE_ALPHA
            and UPSTREAM_FEATURE_GATES.get(name) is gates[name]]


def check(gates: Mapping[str, bool]) -> Mapping[str, bool]:
    """`gates` frozen, or FeatureGateError with every problem (one message, or upstream's aggregate ``[a, b]``)."""
    errors = problems(gates)
    if errors:
        raise FeatureGateError(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
    return MappingProxyType(dict(gates))


def enabled(gates: Mapping[str, bool], name: str) -> bool:
    """Whether the gate `name` is on: as set, else its default (any gate upstream knows: its v1.37.1 default)."""
    return gates.get(name, IMPLEMENTED[name] if name in IMPLEMENTED else UPSTREAM_FEATURE_GATES[name])


__all__ = ["GRACEFUL_NODE_SHUTDOWN", "GRACEFUL_NODE_SHUTDOWN_BASED_ON_POD_PRIORITY", "IMPLEMENTED",
           "IMPLEMENTED_AT_DEFAULT", "IMPLEMENTED_LOCKED", "LOGGING_ALPHA_OPTIONS", "LOGGING_BETA_OPTIONS",
           "NODE_LOG_QUERY", "QOS_RESERVED",
           "SYSTEMD_WATCHDOG", "FeatureGateError", "check", "enabled", "no_ops", "parse_bool", "parse_flag",
           "problems"]
