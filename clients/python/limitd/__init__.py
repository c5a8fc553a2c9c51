"""limitd: a client for limitd, the Raft-replicated rate limiter.

    import limitd
    c = limitd.Client(["http://127.0.0.1:8080"], token="...")
    d = c.check("user:42", policy="api")
    if not d.allowed:
        wait = d.retry_after_ms / 1000

Standard library only. See README.md for the whole API.
"""

from .client import (
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_FAIL_FAST, DEFAULT_REFRESH_INTERVAL, DEFAULT_TIMEOUT,
    FAIL_CLOSED, FAIL_ERROR, FAIL_OPEN, Client,
)
from .errors import (
    ConfigError, Conflict, InternalError, InvalidArgument, LimitdError, MethodNotAllowed, NotFound,
    OutcomeUnknown, Unauthenticated, Unavailable,
)
from .types import NEVER, AllResult, BatchResult, Check, Decision, Limit, Policy

__version__ = "0.1.0"

__all__ = [
    "Client", "Check", "Limit", "Policy", "Decision", "AllResult", "BatchResult", "NEVER",
    "FAIL_ERROR", "FAIL_OPEN", "FAIL_CLOSED",
    "DEFAULT_TIMEOUT", "DEFAULT_REFRESH_INTERVAL", "DEFAULT_CONNECT_TIMEOUT", "DEFAULT_FAIL_FAST",
    "LimitdError", "InvalidArgument", "NotFound", "Conflict", "Unauthenticated", "MethodNotAllowed",
    "InternalError", "Unavailable", "OutcomeUnknown", "ConfigError",
]
