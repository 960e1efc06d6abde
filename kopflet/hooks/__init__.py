"""Policy hooks: the user's Python at a pod's admission, before its starts and after every decision.

``from kopflet import hooks`` gives the public API (`kopflet.hooks.api`); docs/extending.md explains it with the
examples under examples/.
"""

from kopflet.hooks.api import (
    ADMIT,
    DEFAULT_REASON,
    DEFAULT_TIMEOUT,
    FAIL,
    HOOK_FAILED,
    IGNORE,
    MAX_DELAY,
    MAX_TIMEOUT,
    OBSERVE,
    PLAN,
    AdmitHook,
    AdmitRequest,
    AdmitVerdict,
    DecisionView,
    Hook,
    HookEvent,
    ObserveHook,
    PlanHook,
    PlanView,
    Registry,
    Rewrite,
    admit,
    allow,
    observe,
    plan,
    registry,
    reject,
)

__all__ = [
    "ADMIT", "DEFAULT_REASON", "DEFAULT_TIMEOUT", "FAIL", "HOOK_FAILED", "IGNORE", "MAX_DELAY", "MAX_TIMEOUT",
    "OBSERVE", "PLAN", "AdmitHook", "AdmitRequest", "AdmitVerdict", "DecisionView", "Hook", "HookEvent",
    "ObserveHook", "PlanHook", "PlanView", "Registry", "Rewrite", "admit", "allow", "observe", "plan", "registry",
    "reject",
]
