"""Value types of the limitd client: limits, policies, checks and decisions.

Field meanings are those of docs/API.md ("Limits", "Checks"). Durations in
decisions are integer milliseconds, as on the wire (rounded up by the server
so that waiting ``retry_after_ms`` and retrying is not refused by rounding).
"""

from dataclasses import dataclass, field as _field
from typing import Any, Dict, List, Optional

#: ``Decision.retry_after_ms`` of a request that can never be allowed (its
#: cost exceeds the limit or the burst).
NEVER = -1


@dataclass
class Limit:
    """A rate limit: an inline limit of a check, or the body of a policy."""
    algorithm: str  # fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket
    limit: int
    window: Optional[str] = None  # "500ms", "60s", "1h30m", "7d"; None for calendar windows
    burst: Optional[int] = None  # token_bucket / leaky_bucket capacity (None: = limit)
    count_refused: bool = False  # sliding_log only
    calendar: Optional[str] = None  # fixed_window only: day, week, month
    timezone: Optional[str] = None  # with calendar: an IANA zone

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"algorithm": self.algorithm, "limit": self.limit}
        if self.window is not None:
            d["window"] = self.window
        if self.burst is not None:
            d["burst"] = self.burst
        if self.count_refused:
            d["count_refused"] = True
        if self.calendar is not None:
            d["calendar"] = self.calendar
        if self.timezone is not None:
            d["timezone"] = self.timezone
        return d

    def query(self) -> Dict[str, str]:
        """The limit as the query parameters of /v1/keys/{key}."""
        return {k: ("true" if v is True else str(v)) for k, v in self.to_dict().items()}


_LIMIT_FIELDS = ("algorithm", "limit", "window", "burst", "count_refused", "calendar", "timezone")


@dataclass
class Policy:
    """A named limit stored in the cluster.

    ``local_refusals`` None in a put means the server's default (true).
    ``lease`` is the lease option as a dict (``{"share":0.05,"max_ttl":"2s"}``)
    or None; a put replaces the whole policy, so a get-modify-put keeps it.
    Fields this client does not know are kept in ``extra`` and sent back.
    """
    name: str
    algorithm: str
    limit: int
    window: Optional[str] = None
    burst: Optional[int] = None
    count_refused: bool = False
    calendar: Optional[str] = None
    timezone: Optional[str] = None
    shadow: bool = False
    local_refusals: Optional[bool] = None
    lease: Optional[Dict[str, Any]] = None
    extra: Dict[str, Any] = _field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        d = dict(self.extra)
        d.update(Limit(self.algorithm, self.limit, self.window, self.burst, self.count_refused,
                       self.calendar, self.timezone).to_dict())
        d["name"] = self.name
        d["shadow"] = bool(self.shadow)
        if self.local_refusals is not None:
            d["local_refusals"] = self.local_refusals
        if self.lease is not None:
            d["lease"] = self.lease
        return d

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Policy":
        known = set(_LIMIT_FIELDS) | {"name", "shadow", "local_refusals", "lease"}
        return cls(
            name=d.get("name", ""), algorithm=d.get("algorithm", ""), limit=d.get("limit", 0),
            window=d.get("window") or None, burst=d.get("burst") or None,
            count_refused=bool(d.get("count_refused", False)), calendar=d.get("calendar") or None,
            timezone=d.get("timezone") or None, shadow=bool(d.get("shadow", False)),
            local_refusals=d.get("local_refusals"), lease=d.get("lease"),
            extra={k: v for k, v in d.items() if k not in known},
        )


@dataclass
class Check:
    """One check. Exactly one of ``policy`` and ``limit`` must be set.

    ``cost`` 0 is a peek. ``request_id`` None: the client generates one, so
    that its own retries never count twice.
    """
    key: str
    policy: Optional[str] = None
    limit: Optional[Limit] = None
    cost: int = 1
    request_id: Optional[str] = None

    def to_dict(self, request_id: Optional[str] = None) -> Dict[str, Any]:
        d: Dict[str, Any] = {"key": self.key}
        if self.policy is not None:
            d["policy"] = self.policy
        if self.limit is not None:
            d["limit"] = self.limit.to_dict() if isinstance(self.limit, Limit) else dict(self.limit)
        if self.cost != 1:
            d["cost"] = self.cost
        rid = request_id if request_id is not None else self.request_id
        if rid:
            d["request_id"] = rid
        return d


def as_check(c: Any) -> Check:
    """A Check from a Check, a dict with Check's fields, or a (key, policy) tuple."""
    if isinstance(c, Check):
        return c
    if isinstance(c, dict):
        lim = c.get("limit")
        if isinstance(lim, dict):
            lim = Limit(**lim)
        return Check(key=c["key"], policy=c.get("policy"), limit=lim, cost=c.get("cost", 1),
                     request_id=c.get("request_id"))
    if isinstance(c, (tuple, list)) and len(c) == 2:
        return Check(key=c[0], policy=c[1])
    raise TypeError("a check is a limitd.Check, a dict or a (key, policy) pair, not %r" % (c,))


@dataclass
class Decision:
    """The answer to a check."""
    allowed: bool
    limit: int = 0
    remaining: int = 0
    #: Time until the key is back to its fresh state if nothing more arrives.
    reset_after_ms: int = 0
    #: When refused, time until the same request would be allowed; 0 when
    #: allowed; NEVER (-1) when it can never be allowed.
    retry_after_ms: int = 0
    #: leaky_bucket only: how long to wait before proceeding.
    delay_ms: int = 0
    #: A shadow policy would have refused (the answer is still allowed).
    shadow_refused: bool = False
    #: The stored decision of an earlier request with the same request_id.
    replayed: bool = False
    #: Why a list or a ban answered the check: "allowed", "denied" or
    #: "banned"; "" for a decision of the limit.
    reason: str = ""
    #: The cluster could not be reached: the client's fail mode decided.
    degraded: bool = False

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Decision":
        return cls(
            allowed=bool(d.get("allowed", False)), limit=int(d.get("limit", 0)),
            remaining=int(d.get("remaining", 0)), reset_after_ms=int(d.get("reset_after_ms", 0)),
            retry_after_ms=int(d.get("retry_after_ms", 0)), delay_ms=int(d.get("delay_ms", 0)),
            shadow_refused=bool(d.get("shadow_refused", False)), replayed=bool(d.get("replayed", False)),
            reason=str(d.get("reason", "")),
        )

    def __bool__(self) -> bool:  # `if client.check(...):` reads as "if allowed"
        return self.allowed


@dataclass
class AllResult:
    """The answer to check_all: allowed only if every check allowed, and then
    every one was consumed; otherwise none was."""
    allowed: bool
    results: List[Decision]
    replayed: bool = False
    degraded: bool = False

    def __bool__(self) -> bool:
        return self.allowed


@dataclass
class BatchResult:
    """One entry of batch: a decision, or that entry's own error (``field``
    relative to the check, e.g. ``key``)."""
    decision: Optional[Decision] = None
    error: Optional[Exception] = None

    @property
    def ok(self) -> bool:
        return self.error is None
