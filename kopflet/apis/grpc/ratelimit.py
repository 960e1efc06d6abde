"""The rate limit of the kubelet's local gRPC servers (upstream pkg/kubelet/apis/grpc/ratelimit.go
`WithRateLimiter`: a unary interceptor over golang.org/x/time/rate's `Limiter.Allow`), and the same bucket's
`Limiter.Wait` (`reserve`), which client-go's rate limiter uses for the kubelet's event writes.

A token bucket as x/time/rate keeps it: full (`burst` tokens) at first, as a new Go limiter's zero `last` time
fills it; refilled at `qps` tokens a second up to `burst`; each request takes one token or is refused with gRPC
status ``RESOURCE_EXHAUSTED`` "rejected by rate limit" (upstream `ErrorLimitExceeded`). Pure: the caller keeps the
bucket and passes the time (a monotonic clock), so the rule is tested without waiting.
"""

from __future__ import annotations

import dataclasses

LIMIT_EXCEEDED_CODE = "RESOURCE_EXHAUSTED"
"""upstream ErrorLimitExceeded's code (codes.ResourceExhausted)."""
LIMIT_EXCEEDED_MESSAGE = "rejected by rate limit"
"""upstream ErrorLimitExceeded's message."""


@dataclasses.dataclass(frozen=True)
class Limit:
    """`qps` tokens a second, at most `burst` saved up (upstream `rate.NewLimiter(rate.Limit(qps), burst)`)."""

    qps: float
    burst: int


@dataclasses.dataclass(frozen=True)
class Bucket:
    """The limiter's state: the tokens left when last asked, and when (None: never asked, the bucket is full)."""

    tokens: float = 0.0
    last: float | None = None


def allow(limit: Limit, bucket: Bucket, now: float) -> tuple[bool, Bucket]:
    """Upstream `Limiter.Allow` at time `now` (seconds, monotonic): whether the request may go, and the bucket after
    it. Tokens accrue for the time since the last call (none when the clock went back), up to `burst`."""
    if bucket.last is None:
        tokens, last = float(limit.burst), now
    else:
        elapsed = max(0.0, now - bucket.last)
        tokens, last = min(float(limit.burst), bucket.tokens + elapsed * limit.qps), max(now, bucket.last)
    if tokens >= 1:
        return True, Bucket(tokens - 1, last)
    return False, Bucket(tokens, last)


def reserve(limit: Limit, bucket: Bucket, now: float) -> tuple[float, Bucket]:
    """x/time/rate `Limiter.Wait` for one token at time `now` (client-go's token bucket rate limiter, which the
    kubelet's event client gets from eventRecordQPS and eventBurst): the token is taken at once, the bucket going
    into debt when it is empty, and the answer is how long the request waits (0 when a token was there) with the
    bucket after it. Later requests queue behind the debt, so they go at `qps` a second in their order."""
    if bucket.last is None:
        tokens, last = float(limit.burst), now
    else:
        elapsed = max(0.0, now - bucket.last)
        tokens, last = min(float(limit.burst), bucket.tokens + elapsed * limit.qps), max(now, bucket.last)
    tokens -= 1
    return (-tokens / limit.qps if tokens < 0 else 0.0), Bucket(tokens, last)


__all__ = ["LIMIT_EXCEEDED_CODE", "LIMIT_EXCEEDED_MESSAGE", "Bucket", "Limit", "allow", "reserve"]
