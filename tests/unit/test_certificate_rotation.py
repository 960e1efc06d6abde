"""kopflet.certificate.rotation: when the client certificate is renewed (certificate_manager.go
nextRotationDeadline, jitteryDuration), the retries after a failure (run's backoff), when Kopf logs in again, and
when a missing certificate stops the agent (transport.go's exitAfter)."""

from __future__ import annotations

import itertools

import pytest

from kopflet.certificate import rotation
from kopflet.certificate.csr import Subject, Template, client_template, node_subject
from kopflet.certificate.pem import CertificateInfo

DAY = 86400.0


@pytest.mark.parametrize(("not_before", "not_after", "random", "deadline"), [
    (0.0, 100.0, 0.0, 70.0),  # 70% ...
    (0.0, 100.0, 0.5, 80.0),
    (0.0, 100.0, 1.0, 90.0),  # ... to 90% of the lifetime
    (1000.0, 1000.0 + 365 * DAY, 0.25, 1000.0 + 365 * DAY * 0.75),
    # a 5m signing duration: NotBefore backdated 5 minutes, so 10 minutes in all
    (-300.0, 300.0, 0.0, 120.0),
])
def test_rotation_deadline(not_before: float, not_after: float, random: float, deadline: float) -> None:
    assert rotation.rotation_deadline(not_before, not_after, random) == pytest.approx(deadline)


@pytest.mark.parametrize(("random", "delays"), [
    (0.0, [2.0, 4.0, 8.0, 16.0, 32.0, 32.0, 32.0]),
    (1.0, [2.2, 4.4, 8.8, 17.6, 32.0, 32.0, 32.0]),  # up to 10% longer, only in the exponential part
    (0.5, [2.1, 4.2, 8.4, 16.8, 32.0, 32.0, 32.0]),
])
def test_retry_delays(random: float, delays: list[float]) -> None:
    got = list(itertools.islice(rotation.retry_delays(lambda: random), len(delays)))
    assert got == pytest.approx(delays)


SERVING_A = Template(node_subject("a"), ("a",), ("10.0.0.1",))


@pytest.mark.parametrize(("cn", "orgs", "dns", "ips", "template", "fits"), [
    ("system:node:a", ("system:nodes",), (), (), client_template("a"), True),
    ("system:node:a", ("system:nodes", "extra"), (), (), client_template("a"), True),  # extra organizations: fine
    ("system:node:b", ("system:nodes",), (), (), client_template("a"), False),  # renamed node: renewed at once
    ("system:node:a", (), (), (), client_template("a"), False),
    ("x", ("o",), (), (), Template(Subject("x", ())), True),
    # serving: every name and address asked for must be in the certificate; extra ones are fine
    ("system:node:a", ("system:nodes",), ("a",), ("10.0.0.1",), SERVING_A, True),
    ("system:node:a", ("system:nodes",), ("a", "b"), ("10.0.0.1", "10.0.0.2"), SERVING_A, True),
    ("system:node:a", ("system:nodes",), ("a",), ("10.0.0.2",), SERVING_A, False),  # the node's IP changed
    ("system:node:a", ("system:nodes",), (), ("10.0.0.1",), SERVING_A, False),
    ("system:node:a", ("system:nodes",), ("a",), (), None, True),  # no template (no address yet): kept
])
def test_satisfies_template(cn: str, orgs: tuple[str, ...], dns: tuple[str, ...], ips: tuple[str, ...],
                            template: Template | None, fits: bool) -> None:
    info = CertificateInfo(0.0, 1.0, cn, orgs, dns, ips)
    assert rotation.satisfies_template(info, template) is fits


@pytest.mark.parametrize(("now", "deadline", "not_after", "expected"), [
    (0.0, 700.0, 1000.0, 760.0),  # a grace after the deadline
    (0.0, 980.0, 1000.0, 1000.0),  # never after the certificate expires
    (800.0, 700.0, 1000.0, 860.0),  # past the deadline (renewal pending or failing): a grace from now
    (995.0, 700.0, 1000.0, 1000.0),
    (1200.0, 700.0, 1000.0, 1260.0),  # expired: a grace from now, not a login loop
])
def test_relogin_at(now: float, deadline: float, not_after: float, expected: float) -> None:
    assert rotation.relogin_at(now, deadline, not_after) == expected


@pytest.mark.parametrize(("now", "available", "healthy", "expected"), [
    (1000.0, True, True, None),
    (100.0 + 300.0, False, True, None),  # exactly exitAfter: not yet
    (100.0 + 301.0, False, True, ("No valid client certificate is found and the server is responsive, exiting.",
                                  True)),
    (100.0 + 301.0, False, False, ("No valid client certificate is found but the server is not responsive. A restart "
                                   "may be necessary to retrieve new initial credentials.", False)),
])
def test_certificate_problem(now: float, available: bool, healthy: bool,
                             expected: tuple[str, bool] | None) -> None:
    assert rotation.certificate_problem(now, available=available, last_available=100.0,
                                        server_healthy=healthy) == expected


def test_upstream_constants() -> None:
    assert (rotation.EXIT_AFTER, rotation.TRANSPORT_CHECK_PERIOD, rotation.ROUND_PAUSE) == (300.0, 10.0, 1.0)
