"""When the client certificate is renewed, how failed renewals are retried, and when a certificate problem stops
the agent. Pure: the clock's reading and the random numbers are arguments.

Upstream: client-go util/certificate/certificate_manager.go (nextRotationDeadline, jitteryDuration, the backoff
of run, certSatisfiesTemplateLocked) and pkg/kubelet/certificate/transport.go (addCertRotation's exitAfter
checks), v1.37.1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from kopflet.certificate.csr import Template
from kopflet.certificate.pem import CertificateInfo

# jitteryDuration: wait.Jitter(total, 0.2) - 0.3*total, i.e. 70% to 90% of the lifetime after NotBefore.
ROTATION_AT = 0.7
ROTATION_JITTER = 0.2

# run's wait.Backoff{Duration: 2s, Factor: 2, Jitter: 0.1, Steps: 5} for ExponentialBackoffWithContext, then
# PollInfiniteWithContext every 32 s until a rotation succeeds.
BACKOFF_INITIAL = 2.0
BACKOFF_FACTOR = 2.0
BACKOFF_JITTER = 0.1
BACKOFF_STEPS = 5
RETRY_FOREVER_EVERY = 32.0
# wait.UntilWithContext(rotate, time.Second): the loop's pause between two rounds.
ROUND_PAUSE = 1.0

# server.go buildKubeletClientConfig: UpdateTransport(..., exitAfter: 5*time.Minute), checked every 10 s
# (transport.go UpdateTransport's period).
EXIT_AFTER = 5 * 60.0
TRANSPORT_CHECK_PERIOD = 10.0

# Kopf logs in again this long after the rotation deadline, by when the renewal has usually finished; while
# it has not, this often (kopflet's: Kopf has no hook like the Go transport's GetClientCertificate).
RELOGIN_GRACE = 60.0


def rotation_deadline(not_before: float, not_after: float, random: float) -> float:
    """NotBefore plus 70-90% of the lifetime (``random`` in [0, 1) picks where), so nodes added together do not all
    renew at once (nextRotationDeadline)."""
    total = not_after - not_before
    return not_before + total * (ROTATION_AT + ROTATION_JITTER * random)


def retry_delays(random: Callable[[], float]) -> Iterator[float]:
    """The pauses between renewal attempts after a deadline: 2, 4, 8, 16 s (each up to 10% longer), then 32 s
    for ever. ExponentialBackoffWithContext tries 5 times with 4 pauses; PollInfinite waits before each try."""
    duration = BACKOFF_INITIAL
    for _ in range(BACKOFF_STEPS - 1):
        yield duration * (1 + BACKOFF_JITTER * random())
        duration *= BACKOFF_FACTOR
    while True:
        yield RETRY_FOREVER_EVERY


def satisfies_template(info: CertificateInfo, template: Template | None) -> bool:
    """certSatisfiesTemplateLocked: the same CommonName, and every DNS name, IP address and Organization asked for
    (extra ones are fine). A certificate that does not (the node was renamed, or has a new address) is renewed at
    once. Without a template (a serving certificate while the node has no address) any certificate does."""
    if template is None:
        return True
    return (info.common_name == template.subject.common_name
            and set(template.dns_names) <= set(info.dns_names)
            and set(template.ip_addresses) <= set(info.ip_addresses)
            and set(template.subject.organizations) <= set(info.organizations))


def relogin_at(now: float, deadline: float, not_after: float) -> float:
    """When Kopf should take the client certificate again (its ConnectionInfo ``expiration``): a grace after the
    rotation deadline; once past it, a grace from now; never after the certificate expires, unless it already
    has (then a grace from now, so Kopf does not log in again in a loop)."""
    when = max(deadline, now) + RELOGIN_GRACE
    if not_after > now:
        when = min(when, not_after)
    return when


def certificate_problem(now: float, *, available: bool, last_available: float, server_healthy: bool,
                        exit_after: float = EXIT_AFTER) -> tuple[str, bool] | None:
    """addCertRotation's exitAfter check: (message, whether to stop) once there has been no usable certificate (none,
    or expired: the manager's Current() is nil then) for longer than ``exit_after``; None otherwise. Upstream exits
    when the apiserver answers, so a restart can bring new credentials, and only logs while it does not."""
    if available or now <= last_available + exit_after:
        return None
    if server_healthy:
        return "No valid client certificate is found and the server is responsive, exiting.", True
    return ("No valid client certificate is found but the server is not responsive. A restart may be necessary to "
            "retrieve new initial credentials."), False
