"""``featureGates`` / ``--feature-gates``: the gates kopflet implements, and a clear refusal of every other one.

Upstream's kubelet takes any gate its registry knows (cmd/kubelet/app/server.go: ``SetFromMap`` of the flags' gates,
then of the file's merged with them) and refuses an unknown name with ``unrecognized feature gate: X``. kopflet
implements one gate, ``QOSReserved`` (alpha, off by default at v1.37.1: the QoS tiers' memory limits of
``qosReserved``); it cannot honour the others, so naming any of them stops the agent at start rather than being
ignored. A name upstream knows gets kopflet's own refusal, in upstream's words for a gate it will not set; a name
upstream does not know either gets upstream's message (`upstream_feature_gates` lists the registry of v1.37.1).

Pure: the flag's text and the file's mapping in, the gates or an error message out.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from kopflet.config.upstream_feature_gates import UPSTREAM_FEATURE_GATES

QOS_RESERVED: Final = "QOSReserved"
"""pkg/features QOSReserved: alpha since 1.11, default false."""

IMPLEMENTED: Mapping[str, bool] = MappingProxyType({QOS_RESERVED: False})
"""The gates kopflet implements, with their upstream default at v1.37.1."""

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


def problems(gates: Mapping[str, bool]) -> list[str]:
    """Why `gates` cannot be set, one message per name kopflet does not implement, in name order: upstream's
    ``unrecognized feature gate: X`` for a name its registry lacks too, kopflet's refusal for the others."""
    errors = []
    for name in sorted(gates):
        if name in IMPLEMENTED:
            continue
        if name not in UPSTREAM_FEATURE_GATES:
            errors.append(f"unrecognized feature gate: {name}")
            continue
        implemented = ", ".join(sorted(IMPLEMENTED))
        errors.append(f"cannot set feature gate {name} to {str(gates[name]).lower()}, kopflet does not implement it "
                      f"(the only feature gate it takes is {implemented})")
    return errors


def check(gates: Mapping[str, bool]) -> Mapping[str, bool]:
    """`gates` frozen, or FeatureGateError with every problem (one message, or upstream's aggregate ``[a, b]``)."""
    errors = problems(gates)
    if errors:
        raise FeatureGateError(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
    return MappingProxyType(dict(gates))


def enabled(gates: Mapping[str, bool], name: str) -> bool:
    """Whether the gate `name` is on: as set, else its default."""
    return gates.get(name, IMPLEMENTED[name])


__all__ = ["IMPLEMENTED", "QOS_RESERVED", "FeatureGateError", "check", "enabled", "parse_bool", "parse_flag",
           "problems"]
