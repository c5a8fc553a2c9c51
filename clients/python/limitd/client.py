"""The limitd client: checks, policies and keys over limitd's HTTP API.

Mirrors the Go client (client/ in the limitd repository; its DESIGN.md says
why it is built this way):

* Leader awareness: the client learns the leader and the members' HTTP
  addresses from ``GET /v1/cluster``, sends to the leader, follows a
  follower's ``Limitd-Leader`` header, re-learns every ``refresh_interval``
  and between retries, and fails over across every node it knows. A node
  that just failed is not made the target again for a second.
* Exactly once from the caller's view: every check carries a request_id
  (generated unless given: a random per-client prefix and a counter) and an
  attempt whose outcome is unknown (connection lost after sending, ``503
  outcome_unknown``) or that found no leader (``503 unavailable``) is retried
  with the same id until the call's deadline. A returned decision was
  counted exactly once; an error says whether the check may have been
  counted (:class:`OutcomeUnknown`).
* Fail modes: ``fail_mode="open"`` or ``"closed"`` turns an
  :class:`Unavailable` of ``check``/``check_all`` into a degraded decision.
  When every known node refuses connections (nothing listens) the client
  gives up after ``fail_fast`` seconds instead of the whole timeout.

Only the standard library is used (http.client, ssl, json). A Client is
safe to share between threads; each thread keeps its own keep-alive
connections.
"""

import http.client
import itertools
import json
import random
import secrets
import select
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .errors import (
    CODE_INTERNAL, CODE_OUTCOME_UNKNOWN, CODE_UNAVAILABLE, ConfigError, LimitdError,
    OutcomeUnknown, Unavailable, error_from,
)
from .types import AllResult, BatchResult, Check, Decision, Limit, Policy, as_check

DEFAULT_TIMEOUT = 10.0
DEFAULT_REFRESH_INTERVAL = 5.0
DEFAULT_CONNECT_TIMEOUT = 2.0
DEFAULT_FAIL_FAST = 0.5

FAIL_ERROR = "error"
FAIL_OPEN = "open"
FAIL_CLOSED = "closed"

_FAILED_HOST_PAUSE = 1.0
_BACKOFF_MIN = 0.01
_BACKOFF_MAX = 0.25
_LEARN_TIMEOUT = 1.0
_MAX_RESPONSE = 64 << 20
_TLS_REQUIRED_BODY = b"Client sent an HTTP request to an HTTPS server"


class _TransportError(Exception):
    """An attempt that got no HTTP answer; ``sent``: it may have reached the node."""

    def __init__(self, addr: str, sent: bool, cause: BaseException):
        self.addr, self.sent, self.cause = addr, sent, cause
        super().__init__("limitd: %s: %s" % (addr, cause or type(cause).__name__))


def _parse_addr(a: str) -> Tuple[str, str]:
    """("host:port", scheme or "") of "host:port" or "http(s)://host:port"."""
    scheme = ""
    if "://" in a:
        u = urllib.parse.urlsplit(a)
        if u.scheme not in ("http", "https"):
            raise ValueError("limitd: address %r: scheme must be http or https" % a)
        scheme, a = u.scheme, u.netloc
    host, sep, port = a.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError("limitd: address %r: want host:port" % a)
    return a, scheme


def _split_hostport(hp: str) -> Tuple[str, int]:
    host, _, port = hp.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def _b36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    s = ""
    while True:
        n, r = divmod(n, 36)
        s = digits[r] + s
        if n == 0:
            return s


def _retryable(e: LimitdError) -> bool:
    return e.code in (CODE_UNAVAILABLE, CODE_OUTCOME_UNKNOWN) or e.status in (502, 503, 504)


def _may_have_counted(e: Exception) -> bool:
    if isinstance(e, _TransportError):
        return e.sent
    if isinstance(e, LimitdError):
        return e.code == CODE_OUTCOME_UNKNOWN or (e.status >= 500 and e.code != CODE_UNAVAILABLE)
    return False


def _trim_check_prefix(field: str) -> str:
    """A batch entry's field relative to its check: checks[3].limit.window -> limit.window."""
    if field.startswith("checks["):
        i = field.find("].")
        if i >= 0:
            return field[i + 2:]
    return field


class Client:
    """A client of a limitd cluster.

    ``addrs``: one or more node addresses, ``"host:port"``,
    ``"http://host:port"`` or ``"https://host:port"`` (a list, or one string
    with commas). Any node will do: the client learns the others and the
    leader from it. It does not connect until the first call.

    Options:

    * ``token``: the admin token, sent as ``Authorization: Bearer <token>``
      on admin calls (policy writes, key reset).
    * ``timeout``: seconds a call may take, retries included (default 10);
      every call also takes its own ``timeout=``.
    * ``fail_mode``: ``"error"`` (raise Unavailable, the default), ``"open"``
      (allow: ``Decision(allowed=True, degraded=True)``) or ``"closed"``
      (refuse: ``Decision(allowed=False, degraded=True, retry_after_ms=1000)``)
      when no decision came in time. A :class:`ConfigError` is always raised.
    * ``fail_fast``: seconds after which a call gives up when every known
      node refuses connections (default 0.5), instead of retrying until the
      timeout; for a second after that, calls give up once every node has
      refused them once. ``None`` retries until the timeout.
    * ``connect_timeout``: seconds to wait for one TCP (and TLS) connect.
    * ``ca_file``: PEM bundle to verify the nodes' certificates with (https);
      ``cert_file``/``key_file``: a client certificate (mutual TLS);
      ``ssl_context`` replaces all three.
    * ``request_ids``: False stops the client from generating request_ids
      (then a check whose outcome is unknown is not retried and raises
      OutcomeUnknown).
    * ``refresh_interval``: how often the leader is re-learned while
      nothing fails (default 5 s).
    """

    def __init__(self, addrs: Union[str, Sequence[str]], *, token: Optional[str] = None,
                 timeout: float = DEFAULT_TIMEOUT, fail_mode: str = FAIL_ERROR,
                 fail_fast: Optional[float] = DEFAULT_FAIL_FAST,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 ca_file: Optional[str] = None, cert_file: Optional[str] = None,
                 key_file: Optional[str] = None, ssl_context: Optional[ssl.SSLContext] = None,
                 request_ids: bool = True, refresh_interval: float = DEFAULT_REFRESH_INTERVAL):
        if isinstance(addrs, str):
            addrs = [addrs]
        if fail_mode not in (FAIL_ERROR, FAIL_OPEN, FAIL_CLOSED):
            raise ValueError("limitd: fail_mode must be 'error', 'open' or 'closed', not %r" % (fail_mode,))
        self.token = token
        self.timeout = timeout if timeout and timeout > 0 else DEFAULT_TIMEOUT
        self.fail_mode = fail_mode
        self.fail_fast = fail_fast
        self.connect_timeout = connect_timeout
        self.request_ids = request_ids
        self.refresh_interval = refresh_interval
        self._scheme = "https" if (ca_file or cert_file or ssl_context) else "http"
        self._endpoints: List[str] = []
        for a in addrs:
            for part in a.split(","):
                part = part.strip()
                if not part:
                    continue
                host, scheme = _parse_addr(part)
                if scheme == "https":
                    self._scheme = "https"
                if host not in self._endpoints:
                    self._endpoints.append(host)
        if not self._endpoints:
            raise ValueError("limitd: no address given")
        self._ssl = None
        if self._scheme == "https":
            if ssl_context is None:
                ssl_context = ssl.create_default_context(cafile=ca_file)
                if cert_file:
                    ssl_context.load_cert_chain(cert_file, key_file)
            self._ssl = ssl_context
        self._mu = threading.Lock()
        self._next = 0
        self._target: Optional[str] = None
        self._last_learn = 0.0
        self._last_learn_try = -1.0
        self._failed: Dict[str, float] = {}
        # Until when every node is taken to be down (a call just found every
        # one refusing connections): calls then give up after one round.
        self._down_until = 0.0
        self._id_prefix = secrets.token_hex(12) + "-"
        self._id_seq = itertools.count(1)
        self._local = threading.local()
        self._all_conns: List[http.client.HTTPConnection] = []
        #: Counters since the client was made.
        self.stats = {"checks": 0, "retries": 0, "failed_open": 0, "failed_closed": 0, "leader_changes": 0}

    # ------------------------------------------------------------------ public API

    def check(self, key: str, policy: Optional[str] = None, limit: Union[Limit, dict, None] = None,
              cost: int = 1, request_id: Optional[str] = None, timeout: Optional[float] = None) -> Decision:
        """Decide one request (POST /v1/check). Exactly one of ``policy`` and
        ``limit`` (a :class:`Limit` or a dict) must be given; ``cost`` 0 is a
        peek. Retried with the same request_id until the deadline; raises a
        :class:`LimitdError` subclass for what the server refused
        (``field`` names it) and :class:`Unavailable` when no decision came in
        time, unless ``fail_mode`` makes it a degraded decision."""
        if isinstance(limit, dict):
            limit = Limit(**limit)
        c = Check(key=key, policy=policy, limit=limit, cost=cost, request_id=request_id)
        rid = request_id or (self._new_request_id() if self.request_ids else None)
        body = json.dumps(c.to_dict(rid)).encode()
        try:
            out = self._call("POST", "/v1/check", body, admin=False, idempotent=bool(rid), timeout=timeout)
        except Unavailable:
            d = self._fail_decision()
            if d is None:
                raise
            return d
        self.stats["checks"] += 1
        return Decision.from_dict(out)

    def check_all(self, checks: Iterable[Any], request_id: Optional[str] = None,
                  timeout: Optional[float] = None) -> AllResult:
        """Decide layered limits as one atomic step (POST /v1/check/all):
        allowed only if every check allows, and then all are consumed; if any
        refuses, none is. ``checks`` are :class:`Check` objects, dicts or
        ``(key, policy)`` pairs; their own request_ids are ignored: the one
        ``request_id`` (generated unless given) covers the whole step."""
        cs = [as_check(c) for c in checks]
        rid = request_id or (self._new_request_id() if self.request_ids else None)
        doc: Dict[str, Any] = {}
        if rid:
            doc["request_id"] = rid
        doc["checks"] = [dict((k, v) for k, v in c.to_dict("").items() if k != "request_id") for c in cs]
        try:
            out = self._call("POST", "/v1/check/all", json.dumps(doc).encode(), admin=False,
                             idempotent=bool(rid), timeout=timeout)
        except Unavailable:
            d = self._fail_decision()
            if d is None:
                raise
            return AllResult(allowed=d.allowed, results=[d for _ in cs], degraded=True)
        self.stats["checks"] += 1
        return AllResult(allowed=bool(out.get("allowed")), replayed=bool(out.get("replayed", False)),
                         results=[Decision.from_dict(r) for r in out.get("results", [])])

    def batch(self, checks: Iterable[Any], timeout: Optional[float] = None) -> List[BatchResult]:
        """Decide independent checks in one request (POST /v1/check/batch),
        answered in order. An invalid entry gets its own error (``field``
        relative to the check, e.g. ``key``); the others are decided. Entries
        without a request_id get a generated one, so the batch is retried
        safely as a whole."""
        cs = [as_check(c) for c in checks]
        entries = []
        for c in cs:
            rid = c.request_id or (self._new_request_id() if self.request_ids else None)
            entries.append(c.to_dict(rid))
        out = self._call("POST", "/v1/check/batch", json.dumps({"checks": entries}).encode(),
                         admin=False, idempotent=self.request_ids, timeout=timeout)
        results = out.get("results", [])
        if len(results) != len(cs):
            raise LimitdError("batch answered %d results for %d checks" % (len(results), len(cs)))
        res = []
        for r in results:
            e = r.get("error")
            if e is not None:
                res.append(BatchResult(error=error_from(e.get("code", CODE_INTERNAL),
                                                        _trim_check_prefix(e.get("field", "")),
                                                        e.get("message", ""))))
            else:
                res.append(BatchResult(decision=Decision.from_dict(r)))
        self.stats["checks"] += len(cs)
        return res

    def peek(self, key: str, policy: Optional[str] = None, limit: Union[Limit, dict, None] = None,
             timeout: Optional[float] = None) -> Decision:
        """A key's state under a policy or an inline limit, consuming nothing
        (GET /v1/keys/{key}): ``allowed`` says whether a request of cost 1
        would be allowed now."""
        out = self._call("GET", self._key_path(key, policy, limit), None, admin=False, idempotent=True,
                         timeout=timeout)
        return Decision.from_dict(out.get("decision", {}))

    def reset(self, key: str, policy: Optional[str] = None, limit: Union[Limit, dict, None] = None,
              timeout: Optional[float] = None) -> None:
        """Forget a key's state under a policy or inline limit (admin)."""
        self._call("DELETE", self._key_path(key, policy, limit), None, admin=True, idempotent=True,
                   timeout=timeout)

    def put_policy(self, policy: Union[Policy, dict], timeout: Optional[float] = None) -> Policy:
        """Create or replace a policy (admin); returns it as stored
        (normalized, e.g. window "60s" -> "1m")."""
        if isinstance(policy, dict):
            policy = Policy.from_dict(policy)
        if not policy.name:
            raise error_from("invalid_argument", "name", "is required")
        doc = policy.to_dict()
        doc.pop("name", None)
        out = self._call("PUT", "/v1/policies/" + urllib.parse.quote(policy.name, safe=""),
                         json.dumps(doc).encode(), admin=True, idempotent=True, timeout=timeout)
        return Policy.from_dict(out)

    def get_policy(self, name: str, timeout: Optional[float] = None) -> Policy:
        """A policy (the answering node's replicated copy); NotFound if none."""
        out = self._call("GET", "/v1/policies/" + urllib.parse.quote(name, safe=""), None, admin=False,
                         idempotent=True, timeout=timeout)
        return Policy.from_dict(out)

    def list_policies(self, timeout: Optional[float] = None) -> List[Policy]:
        """Every policy, sorted by name."""
        out = self._call("GET", "/v1/policies", None, admin=False, idempotent=True, timeout=timeout)
        return [Policy.from_dict(p) for p in out.get("policies", [])]

    def delete_policy(self, name: str, timeout: Optional[float] = None) -> None:
        """Delete a policy (admin); NotFound when there is none."""
        self._call("DELETE", "/v1/policies/" + urllib.parse.quote(name, safe=""), None, admin=True,
                   idempotent=True, timeout=timeout)

    def cluster(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """GET /v1/cluster from the leader, as a dict (the admin view when the
        client has the token)."""
        return self._call("GET", "/v1/cluster", None, admin=True, idempotent=True, timeout=timeout)

    @property
    def target(self) -> Optional[str]:
        """The node the client sends to now (the leader once learned), or None."""
        return self._target

    @property
    def endpoints(self) -> List[str]:
        """Every node the client knows: the configured ones, then the learned ones."""
        with self._mu:
            return list(self._endpoints)

    def close(self) -> None:
        """Close the keep-alive connections."""
        with self._mu:
            conns, self._all_conns = self._all_conns, []
        for c in conns:
            try:
                c.close()
            except Exception:
                pass

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _new_request_id(self) -> str:
        return self._id_prefix + _b36(next(self._id_seq))

    def _fail_decision(self) -> Optional[Decision]:
        if self.fail_mode == FAIL_OPEN:
            self.stats["failed_open"] += 1
            return Decision(allowed=True, degraded=True)
        if self.fail_mode == FAIL_CLOSED:
            self.stats["failed_closed"] += 1
            return Decision(allowed=False, degraded=True, retry_after_ms=1000)
        return None

    @staticmethod
    def _key_path(key: str, policy: Optional[str], limit: Union[Limit, dict, None]) -> str:
        q: Dict[str, str] = {}
        if policy is not None:
            q["policy"] = policy
        if limit is not None:
            if isinstance(limit, dict):
                limit = Limit(**limit)
            q.update(limit.query())
        return "/v1/keys/" + urllib.parse.quote(key, safe="") + "?" + urllib.parse.urlencode(q)

    def _call(self, method: str, path: str, body: Optional[bytes], admin: bool, idempotent: bool,
              timeout: Optional[float]) -> Dict[str, Any]:
        deadline = time.monotonic() + (timeout if timeout is not None and timeout > 0 else self.timeout)
        data = self._retry(deadline, idempotent, lambda host: self._send(method, host, path, body, admin, deadline))
        if not data:
            return {}
        try:
            return json.loads(data)
        except ValueError as e:
            raise LimitdError("decode answer of %s %s: %s" % (method, path, e)) from None

    # Leader and endpoints -------------------------------------------------------

    def _add_endpoint(self, host: str) -> None:  # with _mu held
        if host not in self._endpoints:
            self._endpoints.append(host)

    def _set_target(self, host: Optional[str]) -> None:
        if host is not None and host != self._target:
            self.stats["leader_changes"] += 1
        self._target = host

    def _pick(self, deadline: float) -> str:
        """The node to send to: the leader when known (re-learned when
        stale), else the next node in turn."""
        now = time.monotonic()
        stale = self._target is None or now - self._last_learn > self.refresh_interval
        if stale and now - self._last_learn_try > 0.1:  # the retry loop has just asked
            try:
                self._learn_leader(min(deadline, now + _LEARN_TIMEOUT))
            except ConfigError:
                pass  # the attempt reports it, for its node
        t = self._target
        if t is not None:
            return t
        with self._mu:
            return self._endpoints[self._next % len(self._endpoints)]

    def _demote(self, host: str) -> None:
        """Forget host as the target after it failed; keep it out for a second."""
        with self._mu:
            if self._target == host:
                self._target = None
            if self._endpoints[self._next % len(self._endpoints)] == host:
                self._next += 1
            self._failed[host] = time.monotonic() + _FAILED_HOST_PAUSE

    def _follow_leader(self, addr: str) -> None:
        """Take the leader a follower named in Limitd-Leader (unless it just failed)."""
        with self._mu:
            self._add_endpoint(addr)
            until = self._failed.get(addr)
            if until is not None and time.monotonic() < until:
                return
            self._set_target(addr)
            self._last_learn = time.monotonic()

    def _learn_leader(self, deadline: float) -> Optional[str]:
        """Ask the known nodes (the target first) for GET /v1/cluster; take
        the first leader_http_addr named, learning the members on the way."""
        self._last_learn_try = time.monotonic()
        with self._mu:
            order = ([self._target] if self._target else []) + [
                self._endpoints[(self._next + i) % len(self._endpoints)] for i in range(len(self._endpoints))]
        seen = set()
        config_errors = []
        tried = 0
        for host in order:
            if host in seen:
                continue
            seen.add(host)
            tried += 1
            if time.monotonic() >= deadline:
                break
            try:
                st = json.loads(self._send("GET", host, "/v1/cluster", None, False, deadline) or b"{}")
            except ConfigError as e:
                config_errors.append(e)
                continue
            except (LimitdError, _TransportError, ValueError):
                continue
            leader = st.get("leader_http_addr") or ""
            with self._mu:
                for m in st.get("members") or []:
                    if m.get("http_addr"):
                        self._add_endpoint(m["http_addr"])
                if not leader:
                    continue
                until = self._failed.get(leader)
                if until is not None:
                    if time.monotonic() < until:
                        continue  # named leader but it just failed for us: the others forward
                    del self._failed[leader]
                self._set_target(leader)
                self._last_learn = time.monotonic()
            return leader
        if config_errors and len(config_errors) == tried:
            raise config_errors[0]
        return None

    # Retries ------------------------------------------------------------------

    def _retry(self, deadline: float, unknown_ok: bool, attempt):
        backoff = _BACKOFF_MIN
        unknown = False
        misconfigured = set()
        refused_since: Optional[float] = None
        refused_hosts = set()
        fail_fast = self.fail_fast
        if fail_fast is not None and time.monotonic() < self._down_until:
            fail_fast = 0.0
        while True:
            host = self._pick(deadline)
            try:
                out = attempt(host)
                self._down_until = 0.0
                return out
            except ConfigError:
                # Not worth a retry on this node; another configured node may be set up differently.
                if host in misconfigured:
                    raise
                misconfigured.add(host)
                self._demote(host)
                if len(misconfigured) >= len(self._endpoints) or time.monotonic() >= deadline:
                    raise
                continue
            except LimitdError as e:
                if not _retryable(e):
                    raise
                err: Exception = e
            except _TransportError as e:
                err = e
            connect_failed = isinstance(err, _TransportError) and not err.sent
            if _may_have_counted(err):
                unknown = True
                if not unknown_ok:
                    raise self._final(err, True, "the request may have been counted and carries no request_id")
            self._demote(host)
            now = time.monotonic()
            if connect_failed:
                if refused_since is None:
                    refused_since = now
                refused_hosts.add(host)
                if (fail_fast is not None and now - refused_since >= fail_fast
                        and refused_hosts.issuperset(self.endpoints)):
                    self._down_until = now + _FAILED_HOST_PAUSE
                    raise self._final(err, unknown, "every known node refused the connection for %.1fs"
                                      % (now - refused_since))
            else:
                refused_since, refused_hosts = None, set()
            if now >= deadline:
                raise self._final(err, unknown, "deadline exceeded")
            sleep = backoff * (0.5 + random.random() / 2)
            time.sleep(max(0.0, min(sleep, deadline - now)))
            backoff = min(backoff * 2, _BACKOFF_MAX)
            if time.monotonic() >= deadline:
                raise self._final(err, unknown, "deadline exceeded")
            self.stats["retries"] += 1
            try:
                self._learn_leader(min(deadline, time.monotonic() + _LEARN_TIMEOUT))
            except ConfigError as ce:
                raise ce from None  # every node is misconfigured: stop retrying

    @staticmethod
    def _final(last: Exception, unknown: bool, why: str) -> Unavailable:
        cls = OutcomeUnknown if unknown else Unavailable
        msg = "%s (last attempt: %s)" % (why, str(last).replace("limitd: ", "", 1))
        if unknown:
            msg += "; it may have been counted"
        status = last.status if isinstance(last, LimitdError) else 0
        retry_after = last.retry_after if isinstance(last, LimitdError) else None
        e = cls(message=msg, status=status, retry_after=retry_after)
        e.__cause__ = last.cause if isinstance(last, _TransportError) else last
        return e

    # One HTTP exchange ------------------------------------------------------------

    def _conn(self, host: str) -> http.client.HTTPConnection:
        conns = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        c = conns.get(host)
        if c is None:
            h, p = _split_hostport(host)
            if self._scheme == "https":
                c = http.client.HTTPSConnection(h, p, context=self._ssl)
            else:
                c = http.client.HTTPConnection(h, p)
            conns[host] = c
            with self._mu:
                self._all_conns.append(c)
        return c

    def _drop(self, host: str) -> None:
        conns = getattr(self._local, "conns", {})
        c = conns.pop(host, None)
        if c is not None:
            c.close()
            with self._mu:
                try:
                    self._all_conns.remove(c)
                except ValueError:
                    pass

    def _send(self, method: str, host: str, path: str, body: Optional[bytes], admin: bool,
              deadline: float) -> bytes:
        """One request to host; the body of a 2xx answer. A non-2xx answer
        raises its typed error; no answer, _TransportError or ConfigError."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _TransportError(host, False, socket.timeout("deadline exceeded before sending"))
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if admin and self.token:
            headers["Authorization"] = "Bearer " + self.token
        conn = self._conn(host)
        sent = False
        try:
            if conn.sock is not None and select.select([conn.sock], [], [], 0)[0]:
                conn.close()  # a kept-alive connection the node closed (or answered unasked): start afresh
            if conn.sock is None:
                conn.timeout = min(self.connect_timeout, remaining)
                conn.connect()
            conn.sock.settimeout(max(0.001, deadline - time.monotonic()))
            sent = True
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read(_MAX_RESPONSE)
            if resp.will_close or not resp.isclosed():  # closing, or an answer larger than we read
                self._drop(host)
        except ssl.SSLCertVerificationError as e:
            self._drop(host)
            reason = (getattr(e, "verify_message", "") or str(e)).lower()
            kind = "hostname" if "hostname" in reason or "ip address mismatch" in reason else (
                "invalid_certificate" if "expired" in reason else "unknown_authority")
            raise ConfigError("%s: %s" % (host, e), kind=kind, addr=host) from e
        except ssl.SSLError as e:
            self._drop(host)
            text = str(e)
            if not sent and ("WRONG_VERSION_NUMBER" in text or "record layer failure" in text
                             or "PACKET_LENGTH_TOO_LONG" in text):
                raise ConfigError("%s: https to a node that serves plain HTTP: %s" % (host, e),
                                  kind="not_tls", addr=host) from e
            if "CERTIFICATE" in text.upper() and "ALERT" in text.upper():
                raise ConfigError("%s: the node refused the client certificate: %s" % (host, e),
                                  kind="client_certificate", addr=host) from e
            raise _TransportError(host, sent, e) from e
        except socket.gaierror as e:
            self._drop(host)
            if e.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", -5)):
                raise ConfigError("%s: %s" % (host, e), kind="unknown_host", addr=host) from e
            raise _TransportError(host, False, e) from e
        except (OSError, http.client.HTTPException) as e:
            self._drop(host)
            raise _TransportError(host, sent, e) from e
        leader = resp.getheader("Limitd-Leader")
        if leader and leader != host:
            self._follow_leader(leader)
        if resp.status // 100 != 2:
            if resp.status == 400 and _TLS_REQUIRED_BODY in data:
                raise ConfigError("%s: plain HTTP to a node that serves HTTPS" % host, kind="tls_required",
                                  addr=host)
            raise self._decode_error(resp, data)
        return data

    @staticmethod
    def _decode_error(resp: http.client.HTTPResponse, data: bytes) -> LimitdError:
        retry_after = None
        ra = resp.getheader("Retry-After")
        if ra and ra.strip().isdigit():
            retry_after = int(ra.strip())
        try:
            e = json.loads(data)["error"]
            if isinstance(e, dict) and e.get("code"):
                return error_from(e["code"], e.get("field", ""), e.get("message", ""), resp.status, retry_after)
        except (ValueError, KeyError, TypeError):
            pass
        # Not limitd's error body (a proxy, a load balancer): keep the status.
        code = CODE_UNAVAILABLE if resp.status in (502, 503, 504) else CODE_INTERNAL
        return error_from(code, "", "HTTP %d: %.200s" % (resp.status, data.strip().decode("utf-8", "replace")),
                          resp.status, retry_after)
