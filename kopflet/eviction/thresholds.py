"""Eviction signals and thresholds: parsing, defaults and the container-filesystem thresholds.

Mirrors upstream `pkg/kubelet/eviction/api/types.go` (signals, the LessThan operator, `Threshold`,
`GetThresholdQuantity`), `defaults_linux.go` (`DefaultEvictionHard`), `cmd/kubelet/app/server.go` (an unset
evictionHard takes the defaults; `mergeDefaultEvictionSettings` fills in the missing signals) and
`helpers.go` (`ParseThresholdConfig`, `addAllocatableThresholds`, `UpdateContainerFsThresholds`). Upstream
validates the eviction maps only here, when the kubelet starts: `parse_threshold_config` raising
`ThresholdError` is the validation (its messages are upstream's).

Pure: no I/O; quantities are exact `Fraction`s, durations are seconds.
"""

from __future__ import annotations

import dataclasses
import math
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction

from kopflet.api import qos

# ------------------------------------------------------------------------------------------------ signals

MEMORY_AVAILABLE = "memory.available"
NODEFS_AVAILABLE = "nodefs.available"
NODEFS_INODES_FREE = "nodefs.inodesFree"
IMAGEFS_AVAILABLE = "imagefs.available"
IMAGEFS_INODES_FREE = "imagefs.inodesFree"
CONTAINERFS_AVAILABLE = "containerfs.available"
CONTAINERFS_INODES_FREE = "containerfs.inodesFree"
ALLOCATABLE_MEMORY_AVAILABLE = "allocatableMemory.available"
PID_AVAILABLE = "pid.available"

OP_LESS_THAN = "LessThan"
"""The only operator (upstream `OpLessThan`): every signal is an amount still available."""

# Node conditions (v1.NodeConditionType) and the resources a signal reclaims (upstream signalToNodeCondition,
# signalToResource; "inodes" and "pids" are the eviction package's own resource names).
MEMORY_PRESSURE = "MemoryPressure"
DISK_PRESSURE = "DiskPressure"
PID_PRESSURE = "PIDPressure"
NODE_CONDITIONS = (MEMORY_PRESSURE, DISK_PRESSURE, PID_PRESSURE)
RESOURCE_MEMORY = "memory"
RESOURCE_EPHEMERAL_STORAGE = "ephemeral-storage"
RESOURCE_INODES = "inodes"
RESOURCE_PIDS = "pids"

SIGNAL_TO_NODE_CONDITION: Mapping[str, str] = {
    MEMORY_AVAILABLE: MEMORY_PRESSURE,
    ALLOCATABLE_MEMORY_AVAILABLE: MEMORY_PRESSURE,
    IMAGEFS_AVAILABLE: DISK_PRESSURE,
    CONTAINERFS_AVAILABLE: DISK_PRESSURE,
    NODEFS_AVAILABLE: DISK_PRESSURE,
    IMAGEFS_INODES_FREE: DISK_PRESSURE,
    NODEFS_INODES_FREE: DISK_PRESSURE,
    CONTAINERFS_INODES_FREE: DISK_PRESSURE,
    PID_AVAILABLE: PID_PRESSURE,
}
SIGNAL_TO_RESOURCE: Mapping[str, str] = {
    MEMORY_AVAILABLE: RESOURCE_MEMORY,
    ALLOCATABLE_MEMORY_AVAILABLE: RESOURCE_MEMORY,
    IMAGEFS_AVAILABLE: RESOURCE_EPHEMERAL_STORAGE,
    IMAGEFS_INODES_FREE: RESOURCE_INODES,
    CONTAINERFS_AVAILABLE: RESOURCE_EPHEMERAL_STORAGE,
    CONTAINERFS_INODES_FREE: RESOURCE_INODES,
    NODEFS_AVAILABLE: RESOURCE_EPHEMERAL_STORAGE,
    NODEFS_INODES_FREE: RESOURCE_INODES,
    PID_AVAILABLE: RESOURCE_PIDS,
}
SIGNALS = tuple(SIGNAL_TO_RESOURCE)
OP_FOR_SIGNAL: Mapping[str, str] = dict.fromkeys(SIGNALS, OP_LESS_THAN)

# defaults_linux.go: the hard thresholds a kubelet without evictionHard runs with.
DEFAULT_EVICTION_HARD: Mapping[str, str] = {
    MEMORY_AVAILABLE: "100Mi",
    NODEFS_AVAILABLE: "10%",
    NODEFS_INODES_FREE: "5%",
    IMAGEFS_AVAILABLE: "15%",
    IMAGEFS_INODES_FREE: "5%",
}
DEFAULT_PRESSURE_TRANSITION_PERIOD = 300.0
"""evictionPressureTransitionPeriod's default (v1beta1 defaults.go): 5m."""
DEFAULT_MAX_POD_GRACE_PERIOD = 0
"""evictionMaxPodGracePeriod's default (v1beta1 types.go): 0 seconds."""
NODE_ALLOCATABLE_ENFORCEMENT_KEY = "pods"
"""enforceNodeAllocatable's "pods" (kubetypes.NodeAllocatableEnforcementKey): adds allocatableMemory.available."""

_UNSUPPORTED_SIGNAL = "unsupported eviction signal {}"


class ThresholdError(ValueError):
    """An eviction setting upstream refuses at start-up; the message is upstream's."""


# ------------------------------------------------------------------------------------------- quantities

BINARY_SI = "BinarySI"
DECIMAL_SI = "DecimalSI"
DECIMAL_EXPONENT = "DecimalExponent"
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_QUANTITY_SUFFIX = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(.*)$")
# apimachinery's ErrFormatWrong / ErrSuffix, which upstream returns unwrapped.
_ERR_FORMAT_WRONG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
_ERR_SUFFIX = "unable to parse quantity's suffix"


def quantity_format(text: str) -> str:
    """The format Go gives a parsed quantity: BinarySI for Ki..Ei, DecimalExponent for e/E, else DecimalSI."""
    match = _QUANTITY_SUFFIX.match(text)
    suffix = match.group(1) if match else ""
    if suffix in _BINARY_SUFFIXES[1:]:
        return BINARY_SI
    if suffix[:1] in ("e", "E") and suffix != "E":
        return DECIMAL_EXPONENT
    return DECIMAL_SI


def format_quantity(value: Fraction | int, fmt: str = DECIMAL_SI) -> str:
    """Go's `Quantity.String()` (canonical form) of `value` held in format `fmt`: ``100Mi``, ``1536``, ``5k``.

    BinarySI uses the largest power of 1024 that divides the value, unless it is fractional or within
    (-1024, 1024), where it falls back to DecimalSI; DecimalSI uses an exponent that is a multiple of 3
    (``500m``, ``2M``), rounded up to nano-units; DecimalExponent writes that exponent as ``e3``.
    """
    value = Fraction(value)
    if value == 0:
        return "0"
    if fmt == BINARY_SI:
        if -1024 < value < 1024 or value.denominator != 1:
            fmt = DECIMAL_SI
        else:
            number, power = value.numerator, 0
            while number % 1024 == 0 and power < len(_BINARY_SUFFIXES) - 1:
                number, power = number // 1024, power + 1
            return f"{number}{_BINARY_SUFFIXES[power]}"
    nanos = value * 10**9
    if nanos.denominator != 1:  # RoundUp(Nano): away from zero
        nanos = Fraction(math.ceil(nanos) if nanos > 0 else math.floor(nanos))
    mantissa, exponent = int(nanos), -9
    while mantissa % 10 == 0:
        mantissa, exponent = mantissa // 10, exponent + 1
    if exponent % 3 == 1:
        mantissa, exponent = mantissa * 10, exponent - 1
    elif exponent % 3 == 2:
        mantissa, exponent = mantissa * 100, exponent - 2
    if fmt == DECIMAL_SI and exponent in _DECIMAL_SUFFIXES:
        return f"{mantissa}{_DECIMAL_SUFFIXES[exponent]}"
    return f"{mantissa}e{exponent}" if exponent else str(mantissa)


def _parse_quantity(text: str) -> Fraction:
    """`resource.ParseQuantity` with upstream's two error messages."""
    try:
        return qos.parse_quantity(text)
    except qos.QuantityError as err:
        raise ThresholdError(_ERR_FORMAT_WRONG if str(err).startswith("quantities must") else _ERR_SUFFIX) from None


def float32(value: float) -> float:
    """Round to the nearest float32, as Go's ``float32(x)``: upstream keeps percentages as float32."""
    return struct.unpack("f", struct.pack("f", value))[0]


_FLOAT = re.compile(r"^[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)$", re.IGNORECASE)


def _parse_percentage(text: str) -> float:
    """upstream parsePercentage: ``strconv.ParseFloat(s, 32)`` of the text before ``%``, divided by 100 in
    float32. (Go's hexadecimal and underscored forms are not accepted here.)"""
    number = text.rstrip("%")
    if not _FLOAT.match(number):
        raise ThresholdError(f'strconv.ParseFloat: parsing "{number}": invalid syntax')
    exact = float(number)
    parsed = float32(exact)
    if math.isinf(parsed) and not math.isinf(exact):  # beyond float32: Go's ErrRange
        raise ThresholdError(f'strconv.ParseFloat: parsing "{number}": value out of range')
    return float32(parsed / 100)


# ------------------------------------------------------------------------------------------------ durations

_DURATION_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 10**9,
                   "m": 60 * 10**9, "h": 3600 * 10**9}
_DURATION_NUMBER = re.compile(r"(\d*)(?:\.(\d*))?")


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration (``time.ParseDuration``: ``1m30s``, ``500ms``, ``0``), errors worded as Go's."""
    quoted = f'"{text}"'
    s, sign = text, 1
    if s[:1] in ("+", "-"):
        sign, s = (-1 if s[0] == "-" else 1), s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ThresholdError(f"time: invalid duration {quoted}")
    nanos = Fraction(0)
    while s:
        match = _DURATION_NUMBER.match(s)
        whole, frac = (match.group(1), match.group(2)) if match else ("", None)
        if not whole and not frac:
            raise ThresholdError(f"time: invalid duration {quoted}")
        s = s[match.end():] if match else s
        end = next((i for i, c in enumerate(s) if c == "." or c.isdigit()), len(s))
        unit, s = s[:end], s[end:]
        if not unit:
            raise ThresholdError(f"time: missing unit in duration {quoted}")
        if unit not in _DURATION_UNITS:
            raise ThresholdError(f'time: unknown unit "{unit}" in duration {quoted}')
        amount = Fraction(int(whole or "0"))
        if frac:
            amount += Fraction(int(frac), 10 ** len(frac))
        nanos += amount * _DURATION_UNITS[unit]
    return float(sign * math.floor(nanos)) / 10**9


# ----------------------------------------------------------------------------------------------- thresholds


@dataclasses.dataclass(frozen=True)
class ThresholdValue:
    """A threshold as an absolute quantity or a fraction of capacity (upstream `ThresholdValue`): `quantity`
    wins when set; `percentage` is the float32 fraction (0.1 for ``10%``); `fmt` is the quantity's format."""

    quantity: Fraction | None = None
    percentage: float = 0.0
    fmt: str = DECIMAL_SI

    def amount(self, capacity: int) -> tuple[int | Fraction, str]:
        """Upstream `GetThresholdQuantity`: the quantity, or ``int64(capacity * percentage)`` as BinarySI."""
        if self.quantity is not None:
            return self.quantity, self.fmt
        return int(float(capacity) * self.percentage), BINARY_SI

    def __str__(self) -> str:
        if self.quantity is not None:
            return format_quantity(self.quantity, self.fmt)
        return f"{self.percentage * 100:g}%"


@dataclasses.dataclass(frozen=True)
class Threshold:
    """One eviction threshold (upstream `Threshold`): evict when `signal` is below `value`.

    `grace_period` (seconds) is how long the threshold must hold first; 0 makes it a hard threshold.
    `min_reclaim` is how far past the threshold the signal must recover before it is let go.
    """

    signal: str
    value: ThresholdValue
    operator: str = OP_LESS_THAN
    grace_period: float = 0.0
    min_reclaim: ThresholdValue | None = None

    @property
    def is_hard(self) -> bool:
        """upstream isHardEvictionThreshold: no grace period (a soft one with ``0s`` counts too)."""
        return self.grace_period == 0

    def __str__(self) -> str:
        """upstream formatThreshold, for logs."""
        return (f"threshold(signal={self.signal}, operator={self.operator}, value={self.value}, "
                f"gracePeriod={self.grace_period}s)")


@dataclasses.dataclass(frozen=True)
class EvictionConfig:
    """What the eviction manager is configured with (upstream `eviction.Config`)."""

    thresholds: tuple[Threshold, ...] = ()
    pressure_transition_period: float = DEFAULT_PRESSURE_TRANSITION_PERIOD
    """evictionPressureTransitionPeriod (seconds): how long a pressure condition stays after its last sighting."""
    max_pod_grace_period: int = DEFAULT_MAX_POD_GRACE_PERIOD
    """evictionMaxPodGracePeriod (seconds): the cap on a pod's grace period for soft evictions."""


def effective_eviction_hard(configured: Mapping[str, str] | None, merge_defaults: bool = False) -> dict[str, str]:
    """evictionHard as the kubelet uses it (upstream loadConfigFile): unset means the Linux defaults; with
    mergeDefaultEvictionSettings the defaults fill in the signals the configuration leaves out. (An explicit
    empty map stays empty: no hard thresholds.)"""
    if configured is None:
        return dict(DEFAULT_EVICTION_HARD)
    result = dict(configured)
    if merge_defaults:
        for signal, value in DEFAULT_EVICTION_HARD.items():
            result.setdefault(signal, value)
    return result


def _check_signal(signal: str) -> None:
    if signal not in SIGNAL_TO_RESOURCE:
        raise ThresholdError(_UNSUPPORTED_SIGNAL.format(signal))


def parse_threshold_statement(signal: str, value: str) -> Threshold | None:
    """upstream parseThresholdStatement: ``10%`` (0% and 100% are ignored: None) or a positive quantity."""
    _check_signal(signal)
    if value.endswith("%"):
        if value in ("0%", "100%"):
            return None
        percentage = _parse_percentage(value)
        if percentage < 0:
            raise ThresholdError(f"eviction percentage threshold {signal} must be >= 0%: {value}")
        if percentage > 1:
            raise ThresholdError(f"eviction percentage threshold {signal} must be <= 100%: {value}")
        return Threshold(signal=signal, operator=OP_FOR_SIGNAL[signal], value=ThresholdValue(percentage=percentage))
    quantity = _parse_quantity(value)
    fmt = quantity_format(value)
    if quantity <= 0:
        raise ThresholdError(f"eviction threshold {signal} must be positive: {format_quantity(quantity, fmt)}")
    return Threshold(signal=signal, operator=OP_FOR_SIGNAL[signal], value=ThresholdValue(quantity=quantity, fmt=fmt))


def _parse_statements(statements: Mapping[str, str] | None) -> list[Threshold]:
    results = []
    for signal, value in (statements or {}).items():
        threshold = parse_threshold_statement(signal, value)
        if threshold is not None:
            results.append(threshold)
    return results


def _parse_grace_periods(statements: Mapping[str, str] | None) -> dict[str, float]:
    """upstream parseGracePeriods: Go durations, not negative."""
    results = {}
    for signal, value in (statements or {}).items():
        _check_signal(signal)
        period = parse_go_duration(value)
        if period < 0:
            raise ThresholdError(f"invalid eviction grace period specified: {value}, must be a positive value")
        results[signal] = period
    return results


def _parse_minimum_reclaims(statements: Mapping[str, str] | None) -> dict[str, ThresholdValue]:
    """upstream parseMinimumReclaims: a positive percentage or a non-negative quantity."""
    results = {}
    for signal, value in (statements or {}).items():
        _check_signal(signal)
        if value.endswith("%"):
            percentage = _parse_percentage(value)
            if percentage <= 0:
                raise ThresholdError(f"eviction percentage minimum reclaim {signal} must be positive: {value}")
            results[signal] = ThresholdValue(percentage=percentage)
            continue
        quantity = _parse_quantity(value)
        if quantity < 0:
            raise ThresholdError(f"negative eviction minimum reclaim specified for {signal}")
        results[signal] = ThresholdValue(quantity=quantity, fmt=quantity_format(value))
    return results


def parse_threshold_config(allocatable_config: Iterable[str], eviction_hard: Mapping[str, str] | None,
                           eviction_soft: Mapping[str, str] | None = None,
                           eviction_soft_grace_period: Mapping[str, str] | None = None,
                           eviction_minimum_reclaim: Mapping[str, str] | None = None) -> list[Threshold]:
    """upstream ParseThresholdConfig: hard thresholds, then soft ones (each must have a grace period), the
    minimum reclaims attached by signal, and with ``pods`` in enforceNodeAllocatable an
    allocatableMemory.available copy of the hard memory.available threshold. Raises `ThresholdError`.

    Pass `effective_eviction_hard(...)` as `eviction_hard`: the defaults are the config loader's job upstream.
    """
    results = _parse_statements(eviction_hard)
    soft = _parse_statements(eviction_soft)
    grace_periods = _parse_grace_periods(eviction_soft_grace_period)
    min_reclaims = _parse_minimum_reclaims(eviction_minimum_reclaim)
    for i, threshold in enumerate(soft):
        if threshold.signal not in grace_periods:
            raise ThresholdError(f"grace period must be specified for the soft eviction threshold {threshold.signal}")
        soft[i] = dataclasses.replace(threshold, grace_period=grace_periods[threshold.signal])
    results += soft
    results = [dataclasses.replace(t, min_reclaim=min_reclaims[t.signal]) if t.signal in min_reclaims else t
               for t in results]
    if NODE_ALLOCATABLE_ENFORCEMENT_KEY in allocatable_config:
        results = add_allocatable_thresholds(results)
    return results


def add_allocatable_thresholds(thresholds: Sequence[Threshold]) -> list[Threshold]:
    """upstream addAllocatableThresholds: each hard memory.available threshold again for
    allocatableMemory.available (the pods cgroup against allocatable)."""
    extra = [Threshold(signal=ALLOCATABLE_MEMORY_AVAILABLE, operator=t.operator, value=t.value,
                       min_reclaim=t.min_reclaim)
             for t in thresholds if t.signal == MEMORY_AVAILABLE and t.is_hard]
    return [*thresholds, *extra]


def update_container_fs_thresholds(thresholds: Sequence[Threshold], image_fs: bool,
                                   separate_container_image_fs: bool) -> tuple[list[Threshold], list[str]]:
    """upstream UpdateContainerFsThresholds: containerfs.* thresholds copied from nodefs (one filesystem, or
    containers split from images) or from imagefs (a separate image filesystem holding the writable layers).

    Configured containerfs.* thresholds are overridden in place; each one found adds a warning (upstream's
    joined error, which the manager only logs). A missing source threshold copies as an empty one (no value,
    no operator), which never fires, as upstream's zero Threshold.
    """
    result = list(thresholds)
    warnings = []
    source: dict[tuple[str, bool], Threshold] = {}
    existing: dict[tuple[str, bool], int] = {}
    for index, threshold in enumerate(result):
        key = (threshold.signal, threshold.is_hard)
        if threshold.signal in (CONTAINERFS_AVAILABLE, CONTAINERFS_INODES_FREE):
            kind = "hard" if threshold.is_hard else "soft"
            warnings.append(f"found {threshold.signal} for {kind} eviction. ignoring")
            existing[key] = index
        else:
            source[key] = threshold
    if image_fs and not separate_container_image_fs:
        from_disk, from_inodes = IMAGEFS_AVAILABLE, IMAGEFS_INODES_FREE
    else:
        from_disk, from_inodes = NODEFS_AVAILABLE, NODEFS_INODES_FREE
    empty = Threshold(signal="", operator="", value=ThresholdValue())
    for target, origin in ((CONTAINERFS_AVAILABLE, from_disk), (CONTAINERFS_INODES_FREE, from_inodes)):
        for hard in (True, False):
            found = source.get((origin, hard), empty)
            copied = Threshold(signal=target, operator=found.operator, value=found.value,
                               grace_period=0.0 if hard else found.grace_period, min_reclaim=found.min_reclaim)
            if (target, hard) in existing:
                result[existing[(target, hard)]] = copied
            else:
                result.append(copied)
    return result, warnings
