"""Typed errors of the limitd client.

Every error the server answers is ``{"error":{"code","field","message"}}``;
the client raises the class of its ``code``, carrying ``code``, ``field``,
``message``, the HTTP ``status`` and the server's ``Retry-After`` (seconds).
Switch on the class or on ``code``, never on ``message``.

Hierarchy::

    LimitdError
    +-- InvalidArgument       invalid_argument, payload_too_large
    +-- NotFound              not_found
    +-- Conflict              conflict (a request_id reused for another request)
    +-- Unauthenticated       unauthenticated (admin call without the right token)
    +-- MethodNotAllowed      method_not_allowed
    +-- InternalError         internal
    +-- Unavailable           unavailable: no decision before the deadline
    |   +-- OutcomeUnknown    outcome_unknown: it may have been counted
    +-- ConfigError           the client cannot talk to the node as configured
                              (untrusted certificate, https to plain http, ...)
"""

CODE_INVALID_ARGUMENT = "invalid_argument"
CODE_UNAUTHENTICATED = "unauthenticated"
CODE_NOT_FOUND = "not_found"
CODE_METHOD_NOT_ALLOWED = "method_not_allowed"
CODE_CONFLICT = "conflict"
CODE_PAYLOAD_TOO_LARGE = "payload_too_large"
CODE_UNAVAILABLE = "unavailable"
CODE_OUTCOME_UNKNOWN = "outcome_unknown"
CODE_INTERNAL = "internal"


class LimitdError(Exception):
    """Base class of every error the client raises."""

    default_code = CODE_INTERNAL

    def __init__(self, message="", code=None, field="", status=0, retry_after=None):
        self.code = code or self.default_code
        self.field = field or ""
        self.message = message or ""
        self.status = status
        #: The server's Retry-After in seconds (503s), or None.
        self.retry_after = retry_after
        super().__init__(str(self))

    def __str__(self):
        s = "limitd: " + self.code
        if self.field:
            s += ": " + self.field
        if self.message:
            s += ": " + self.message
        return s

    def __repr__(self):
        return "%s(code=%r, field=%r, message=%r, status=%r)" % (
            type(self).__name__, self.code, self.field, self.message, self.status)


class InvalidArgument(LimitdError):
    """The request is malformed; ``field`` names what (e.g. ``limit.window``)."""
    default_code = CODE_INVALID_ARGUMENT


class NotFound(LimitdError):
    """Unknown policy (``field`` ``policy``), key route or node."""
    default_code = CODE_NOT_FOUND


class Conflict(LimitdError):
    """A request_id reused for a different request; ``field`` names what differs."""
    default_code = CODE_CONFLICT


class Unauthenticated(LimitdError):
    """An admin call without the right token (``token=``)."""
    default_code = CODE_UNAUTHENTICATED


class MethodNotAllowed(LimitdError):
    default_code = CODE_METHOD_NOT_ALLOWED


class InternalError(LimitdError):
    default_code = CODE_INTERNAL


class Unavailable(LimitdError):
    """No node answered with a decision before the deadline (no leader,
    connection refused, timeouts). The client already retried, with the same
    request_id. Unless it is an :class:`OutcomeUnknown`, nothing was counted."""
    default_code = CODE_UNAVAILABLE


class OutcomeUnknown(Unavailable):
    """The last attempt may have been counted (leadership changed while it
    was in flight, or the connection was lost after sending) and the deadline
    passed before a retry with the same request_id could tell."""
    default_code = CODE_OUTCOME_UNKNOWN


class ConfigError(LimitdError):
    """The client, as configured, cannot talk to the node and retrying will
    not help: a certificate it does not trust, https to a plain-HTTP node or
    the reverse, a host name that does not resolve. ``kind`` says which. It
    is not an :class:`Unavailable`: fail modes do not hide it."""
    default_code = "config"

    def __init__(self, message="", kind="", addr=""):
        self.kind = kind
        self.addr = addr
        super().__init__(message=message, code="config", field=kind)


_BY_CODE = {
    CODE_INVALID_ARGUMENT: InvalidArgument,
    CODE_PAYLOAD_TOO_LARGE: InvalidArgument,
    CODE_NOT_FOUND: NotFound,
    CODE_CONFLICT: Conflict,
    CODE_UNAUTHENTICATED: Unauthenticated,
    CODE_METHOD_NOT_ALLOWED: MethodNotAllowed,
    CODE_INTERNAL: InternalError,
    CODE_UNAVAILABLE: Unavailable,
    CODE_OUTCOME_UNKNOWN: OutcomeUnknown,
}

_STATUS_OF = {
    CODE_INVALID_ARGUMENT: 400,
    CODE_PAYLOAD_TOO_LARGE: 413,
    CODE_NOT_FOUND: 404,
    CODE_CONFLICT: 409,
    CODE_UNAUTHENTICATED: 401,
    CODE_METHOD_NOT_ALLOWED: 405,
    CODE_UNAVAILABLE: 503,
    CODE_OUTCOME_UNKNOWN: 503,
}


def error_from(code, field="", message="", status=None, retry_after=None):
    """The typed error of a server ``code`` (unknown codes: LimitdError)."""
    cls = _BY_CODE.get(code, LimitdError)
    if status is None:
        status = _STATUS_OF.get(code, 500)
    return cls(message=message, code=code, field=field, status=status, retry_after=retry_after)
