'use strict';
// limitd: a client for limitd, the Raft-replicated rate limiter, over its
// HTTP API (docs/API.md). Node's built-in http/https only.
//
// It mirrors the Go client (client/ in the limitd repository, whose
// DESIGN.md says why it is built this way):
//
// - Leader awareness: the leader and the members' HTTP addresses are learned
//   from GET /v1/cluster; requests go to the leader; a follower's
//   Limitd-Leader header is followed; the leader is re-learned every
//   refreshInterval and between retries; failover goes across every known
//   node, and a node that just failed is not made the target for a second.
// - Exactly once from the caller's view: every check carries a request_id
//   (generated unless given) and an attempt whose outcome is unknown
//   (connection lost after sending, 503 outcome_unknown) or that found no
//   leader (503 unavailable) is retried with the same id until the deadline.
//   A returned decision was counted exactly once; an error says whether the
//   check may have been counted (OutcomeUnknown).
// - Fail modes: failMode 'open' or 'closed' turns an Unavailable of check or
//   checkAll into a degraded decision. When every known node refuses
//   connections, the call gives up after failFast ms, not the whole timeout.

const http = require('node:http');
const https = require('node:https');
const fs = require('node:fs');
const crypto = require('node:crypto');

const DEFAULT_TIMEOUT = 10000;
const DEFAULT_REFRESH_INTERVAL = 5000;
const DEFAULT_CONNECT_TIMEOUT = 2000;
const DEFAULT_FAIL_FAST = 500;
const NEVER = -1;

const FAILED_HOST_PAUSE = 1000;
const BACKOFF_MIN = 10;
const BACKOFF_MAX = 250;
const LEARN_TIMEOUT = 1000;
const MAX_RESPONSE = 64 << 20;
const TLS_REQUIRED_BODY = 'Client sent an HTTP request to an HTTPS server';

// ---------------------------------------------------------------- errors

/**
 * Base class of every error the client throws. For an error the server
 * answered: its `code`, `field` and message (`serverMessage`) from the
 * `{"error":{"code","field","message"}}` body, the HTTP `status` and the
 * server's Retry-After in seconds (`retryAfter`, or null).
 */
class LimitdError extends Error {
  constructor(serverMessage = '', { code, field = '', status = 0, retryAfter = null } = {}) {
    const c = code || new.target.defaultCode || 'internal';
    let s = 'limitd: ' + c;
    if (field) s += ': ' + field;
    if (serverMessage) s += ': ' + serverMessage;
    super(s);
    this.name = new.target.name;
    this.code = c;
    this.field = field || '';
    this.serverMessage = serverMessage || '';
    this.status = status;
    this.retryAfter = retryAfter;
  }
}
LimitdError.defaultCode = 'internal';

class InvalidArgument extends LimitdError {}
InvalidArgument.defaultCode = 'invalid_argument';
class NotFound extends LimitdError {}
NotFound.defaultCode = 'not_found';
class Conflict extends LimitdError {}
Conflict.defaultCode = 'conflict';
class Unauthenticated extends LimitdError {}
Unauthenticated.defaultCode = 'unauthenticated';
class MethodNotAllowed extends LimitdError {}
MethodNotAllowed.defaultCode = 'method_not_allowed';
class InternalError extends LimitdError {}
InternalError.defaultCode = 'internal';
/** No node answered with a decision before the deadline; nothing was counted unless it is an OutcomeUnknown. */
class Unavailable extends LimitdError {}
Unavailable.defaultCode = 'unavailable';
/** The last attempt may have been counted and the deadline passed before a retry with the same request_id could tell. */
class OutcomeUnknown extends Unavailable {}
OutcomeUnknown.defaultCode = 'outcome_unknown';
/** The client cannot talk to the node as configured (certificate, scheme, host name); not retried, not hidden by fail modes. */
class ConfigError extends LimitdError {
  constructor(message, { kind = '', addr = '', cause } = {}) {
    super(message, { code: 'config', field: kind });
    this.kind = kind;
    this.addr = addr;
    if (cause) this.cause = cause;
  }
}

const BY_CODE = {
  invalid_argument: InvalidArgument,
  payload_too_large: InvalidArgument,
  not_found: NotFound,
  conflict: Conflict,
  unauthenticated: Unauthenticated,
  method_not_allowed: MethodNotAllowed,
  internal: InternalError,
  unavailable: Unavailable,
  outcome_unknown: OutcomeUnknown,
};
const STATUS_OF = {
  invalid_argument: 400, payload_too_large: 413, not_found: 404, conflict: 409,
  unauthenticated: 401, method_not_allowed: 405, unavailable: 503, outcome_unknown: 503,
};

function errorFrom(code, field, message, status, retryAfter = null) {
  const Cls = BY_CODE[code] || LimitdError;
  return new Cls(message || '', { code, field: field || '', status: status ?? STATUS_OF[code] ?? 500, retryAfter });
}

/** An attempt that got no HTTP answer; sent: it may have reached the node. */
class TransportError extends Error {
  constructor(addr, sent, cause) {
    super(`limitd: ${addr}: ${cause && cause.message ? cause.message : cause}`);
    this.addr = addr;
    this.sent = sent;
    this.cause = cause;
  }
}

function retryable(e) {
  return e.code === 'unavailable' || e.code === 'outcome_unknown' || [502, 503, 504].includes(e.status);
}

function mayHaveCounted(e) {
  if (e instanceof TransportError) return e.sent;
  return e.code === 'outcome_unknown' || (e.status >= 500 && e.code !== 'unavailable');
}

function trimCheckPrefix(field) {
  if (field && field.startsWith('checks[')) {
    const i = field.indexOf('].');
    if (i >= 0) return field.slice(i + 2);
  }
  return field || '';
}

// ---------------------------------------------------------------- helpers

function parseAddr(a) {
  let scheme = '';
  let hostport = a;
  const i = a.indexOf('://');
  if (i >= 0) {
    scheme = a.slice(0, i);
    if (scheme !== 'http' && scheme !== 'https') throw new TypeError(`limitd: address ${JSON.stringify(a)}: scheme must be http or https`);
    hostport = a.slice(i + 3).replace(/\/+$/, '');
  }
  const j = hostport.lastIndexOf(':');
  if (j <= 0 || !/^[0-9]+$/.test(hostport.slice(j + 1))) throw new TypeError(`limitd: address ${JSON.stringify(a)}: want host:port`);
  return { host: hostport, scheme };
}

function splitHostPort(hp) {
  const j = hp.lastIndexOf(':');
  let host = hp.slice(0, j);
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  return { hostname: host, port: Number(hp.slice(j + 1)) };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function decision(d = {}, extra = {}) {
  return {
    allowed: !!d.allowed,
    limit: d.limit || 0,
    remaining: d.remaining || 0,
    resetAfterMs: d.reset_after_ms || 0,
    retryAfterMs: d.retry_after_ms || 0,
    delayMs: d.delay_ms || 0,
    shadowRefused: !!d.shadow_refused,
    replayed: !!d.replayed,
    reason: d.reason || '',
    degraded: false,
    ...extra,
  };
}

function checkBody(c, requestId) {
  if (!c || typeof c !== 'object') throw new TypeError('limitd: a check is an object {key, policy | limit, cost?, requestId?}');
  const b = { key: c.key };
  if (c.policy != null) b.policy = c.policy;
  if (c.limit != null) b.limit = c.limit;
  if (c.cost != null && c.cost !== 1) b.cost = c.cost;
  if (requestId) b.request_id = requestId;
  return b;
}

function keyPath(key, policy, limit) {
  const q = new URLSearchParams();
  if (policy != null) q.set('policy', policy);
  if (limit != null) {
    for (const [k, v] of Object.entries(limit)) {
      if (v === undefined || v === null || v === false) continue;
      q.set(k, String(v));
    }
  }
  return '/v1/keys/' + encodeURIComponent(key) + '?' + q.toString();
}

const CERT_UNKNOWN_AUTHORITY = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'SELF_SIGNED_CERT_IN_CHAIN', 'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_GET_ISSUER_CERT', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
]);
const CERT_INVALID = new Set(['CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID', 'CERT_REVOKED', 'CERT_UNTRUSTED', 'CERT_REJECTED']);

// configKind classifies a request error as a configuration error, or ''.
function configKind(err, tlsConnected) {
  const code = err && err.code;
  if (CERT_UNKNOWN_AUTHORITY.has(code)) return 'unknown_authority';
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') return 'hostname';
  if (CERT_INVALID.has(code)) return 'invalid_certificate';
  if (code === 'ENOTFOUND') return 'unknown_host';
  const msg = String((err && err.message) || '');
  if (/alert (certificate required|bad certificate|unknown ca)|tlsv13 alert certificate required/i.test(msg)) return 'client_certificate';
  if (!tlsConnected && (/wrong version number|packet length too long|record layer failure/i.test(msg))) return 'not_tls';
  return '';
}

// ---------------------------------------------------------------- client

class Client {
  /**
   * @param {string|string[]} addrs node addresses: "host:port", "http://host:port" or "https://host:port"
   * @param {object} [opts] see index.d.ts (ClientOptions)
   */
  constructor(addrs, opts = {}) {
    if (typeof addrs === 'string') addrs = [addrs];
    const failMode = opts.failMode || 'error';
    if (!['error', 'open', 'closed'].includes(failMode)) throw new TypeError(`limitd: failMode must be 'error', 'open' or 'closed', not ${JSON.stringify(failMode)}`);
    this.token = opts.token || null;
    this.timeout = opts.timeout > 0 ? opts.timeout : DEFAULT_TIMEOUT;
    this.failMode = failMode;
    this.failFast = opts.failFast === undefined ? DEFAULT_FAIL_FAST : opts.failFast;
    this.connectTimeout = opts.connectTimeout > 0 ? opts.connectTimeout : DEFAULT_CONNECT_TIMEOUT;
    this.requestIds = opts.requestIds !== false;
    this.refreshInterval = opts.refreshInterval > 0 ? opts.refreshInterval : DEFAULT_REFRESH_INTERVAL;
    const tls = {};
    if (opts.ca) tls.ca = opts.ca;
    if (opts.caFile) tls.ca = fs.readFileSync(opts.caFile);
    if (opts.cert) tls.cert = opts.cert;
    if (opts.certFile) tls.cert = fs.readFileSync(opts.certFile);
    if (opts.key) tls.key = opts.key;
    if (opts.keyFile) tls.key = fs.readFileSync(opts.keyFile);
    this._scheme = Object.keys(tls).length > 0 ? 'https' : 'http';
    this._endpoints = [];
    for (const a of addrs) {
      for (let part of String(a).split(',')) {
        part = part.trim();
        if (!part) continue;
        const { host, scheme } = parseAddr(part);
        if (scheme === 'https') this._scheme = 'https';
        if (!this._endpoints.includes(host)) this._endpoints.push(host);
      }
    }
    if (this._endpoints.length === 0) throw new TypeError('limitd: no address given');
    const agentOpts = { keepAlive: true, maxSockets: 64, maxFreeSockets: 64 };
    this._agent = this._scheme === 'https' ? new https.Agent({ ...agentOpts, ...tls }) : new http.Agent(agentOpts);
    this._mod = this._scheme === 'https' ? https : http;
    this._next = 0;
    this._target = null;
    this._lastLearn = 0;
    this._lastLearnTry = -Infinity;
    this._learning = null;
    this._failed = new Map();
    // Until when every node is taken to be down (a call just found every one
    // refusing connections): calls then give up after one round.
    this._downUntil = 0;
    this._idPrefix = crypto.randomBytes(12).toString('hex') + '-';
    this._idSeq = 0;
    /** Counters since the client was made. */
    this.stats = { checks: 0, retries: 0, failedOpen: 0, failedClosed: 0, leaderChanges: 0 };
  }

  /** The node the client sends to now (the leader once learned), or null. */
  get target() { return this._target; }

  /** Every node the client knows: the configured ones, then the learned ones. */
  get endpoints() { return [...this._endpoints]; }

  /** Closes the keep-alive connections. */
  close() { this._agent.destroy(); }

  // -------------------------------------------------------------- public API

  /** Decides one request (POST /v1/check). */
  async check(req, opts = {}) {
    const rid = req.requestId || (this.requestIds ? this._newRequestId() : null);
    const body = JSON.stringify(checkBody(req, rid));
    let out;
    try {
      out = await this._call('POST', '/v1/check', body, { admin: false, idempotent: !!rid, timeout: opts.timeout });
    } catch (e) {
      const d = e instanceof Unavailable ? this._failDecision() : null;
      if (d === null) throw e;
      return d;
    }
    this.stats.checks++;
    return decision(out);
  }

  /** Decides layered limits as one atomic step (POST /v1/check/all). */
  async checkAll(checks, opts = {}) {
    const rid = opts.requestId || (this.requestIds ? this._newRequestId() : null);
    const doc = {};
    if (rid) doc.request_id = rid;
    doc.checks = checks.map((c) => checkBody(c, null));
    let out;
    try {
      out = await this._call('POST', '/v1/check/all', JSON.stringify(doc), { admin: false, idempotent: !!rid, timeout: opts.timeout });
    } catch (e) {
      const d = e instanceof Unavailable ? this._failDecision() : null;
      if (d === null) throw e;
      return { allowed: d.allowed, results: checks.map(() => ({ ...d })), replayed: false, degraded: true };
    }
    this.stats.checks++;
    return { allowed: !!out.allowed, results: (out.results || []).map((r) => decision(r)), replayed: !!out.replayed, degraded: false };
  }

  /** Decides independent checks in one request (POST /v1/check/batch); each entry gets its decision or its own error. */
  async batch(checks, opts = {}) {
    const entries = checks.map((c) => checkBody(c, c.requestId || (this.requestIds ? this._newRequestId() : null)));
    const out = await this._call('POST', '/v1/check/batch', JSON.stringify({ checks: entries }), { admin: false, idempotent: this.requestIds, timeout: opts.timeout });
    const results = out.results || [];
    if (results.length !== checks.length) throw new LimitdError(`batch answered ${results.length} results for ${checks.length} checks`);
    this.stats.checks += checks.length;
    return results.map((r) => {
      if (r.error) {
        return { decision: null, error: errorFrom(r.error.code || 'internal', trimCheckPrefix(r.error.field), r.error.message) };
      }
      return { decision: decision(r), error: null };
    });
  }

  /** A key's state without consuming anything (GET /v1/keys/{key}). */
  async peek(key, opts = {}) {
    const out = await this._call('GET', keyPath(key, opts.policy, opts.limit), null, { admin: false, idempotent: true, timeout: opts.timeout });
    return decision(out.decision);
  }

  /** Forgets a key's state under a policy or inline limit (admin). */
  async reset(key, opts = {}) {
    await this._call('DELETE', keyPath(key, opts.policy, opts.limit), null, { admin: true, idempotent: true, timeout: opts.timeout });
  }

  /** Creates or replaces a policy (admin); resolves to it as stored. */
  async putPolicy(policy, opts = {}) {
    if (!policy || !policy.name) throw errorFrom('invalid_argument', 'name', 'is required');
    const { name, ...rest } = policy;
    return this._call('PUT', '/v1/policies/' + encodeURIComponent(name), JSON.stringify(rest), { admin: true, idempotent: true, timeout: opts.timeout });
  }

  /** A policy (the answering node's replicated copy); NotFound when there is none. */
  async getPolicy(name, opts = {}) {
    return this._call('GET', '/v1/policies/' + encodeURIComponent(name), null, { admin: false, idempotent: true, timeout: opts.timeout });
  }

  /** Every policy, sorted by name. */
  async listPolicies(opts = {}) {
    const out = await this._call('GET', '/v1/policies', null, { admin: false, idempotent: true, timeout: opts.timeout });
    return out.policies || [];
  }

  /** Deletes a policy (admin); NotFound when there is none. */
  async deletePolicy(name, opts = {}) {
    await this._call('DELETE', '/v1/policies/' + encodeURIComponent(name), null, { admin: true, idempotent: true, timeout: opts.timeout });
  }

  /** GET /v1/cluster through the leader (the admin view with the token). */
  async cluster(opts = {}) {
    return this._call('GET', '/v1/cluster', null, { admin: true, idempotent: true, timeout: opts.timeout });
  }

  // -------------------------------------------------------------- internals

  _newRequestId() { return this._idPrefix + (++this._idSeq).toString(36); }

  _failDecision() {
    if (this.failMode === 'open') {
      this.stats.failedOpen++;
      return decision({ allowed: true }, { degraded: true });
    }
    if (this.failMode === 'closed') {
      this.stats.failedClosed++;
      return decision({ allowed: false, retry_after_ms: 1000 }, { degraded: true });
    }
    return null;
  }

  async _call(method, path, body, { admin, idempotent, timeout }) {
    const deadline = Date.now() + (timeout > 0 ? timeout : this.timeout);
    const data = await this._retry(deadline, idempotent, (host) => this._send(method, host, path, body, admin, deadline));
    if (!data || data.length === 0) return {};
    try {
      return JSON.parse(data);
    } catch (e) {
      throw new LimitdError(`decode answer of ${method} ${path}: ${e.message}`);
    }
  }

  _addEndpoint(host) { if (!this._endpoints.includes(host)) this._endpoints.push(host); }

  _setTarget(host) {
    if (host && host !== this._target) this.stats.leaderChanges++;
    this._target = host;
  }

  async _pick(deadline) {
    const now = Date.now();
    const stale = this._target === null || now - this._lastLearn > this.refreshInterval;
    if (stale && now - this._lastLearnTry > 100) {
      try {
        await this._learnLeader(Math.min(deadline, now + LEARN_TIMEOUT));
      } catch (e) {
        if (!(e instanceof ConfigError)) throw e; // the attempt reports it, for its node
      }
    }
    if (this._target !== null) return this._target;
    return this._endpoints[this._next % this._endpoints.length];
  }

  _demote(host) {
    if (this._target === host) this._target = null;
    if (this._endpoints[this._next % this._endpoints.length] === host) this._next++;
    this._failed.set(host, Date.now() + FAILED_HOST_PAUSE);
  }

  _followLeader(addr) {
    this._addEndpoint(addr);
    const until = this._failed.get(addr);
    if (until !== undefined && Date.now() < until) return;
    this._setTarget(addr);
    this._lastLearn = Date.now();
  }

  // One discovery at a time: concurrent callers share it.
  _learnLeader(deadline) {
    if (!this._learning) {
      this._learning = this._doLearnLeader(deadline).finally(() => { this._learning = null; });
    }
    return this._learning;
  }

  async _doLearnLeader(deadline) {
    this._lastLearnTry = Date.now();
    const order = [];
    if (this._target) order.push(this._target);
    for (let i = 0; i < this._endpoints.length; i++) order.push(this._endpoints[(this._next + i) % this._endpoints.length]);
    const seen = new Set();
    const configErrors = [];
    for (const host of order) {
      if (seen.has(host)) continue;
      seen.add(host);
      if (Date.now() >= deadline) break;
      let st;
      try {
        st = JSON.parse((await this._send('GET', host, '/v1/cluster', null, false, deadline)) || '{}');
      } catch (e) {
        if (e instanceof ConfigError) configErrors.push(e);
        continue;
      }
      for (const m of st.members || []) if (m.http_addr) this._addEndpoint(m.http_addr);
      const leader = st.leader_http_addr || '';
      if (!leader) continue;
      const until = this._failed.get(leader);
      if (until !== undefined) {
        if (Date.now() < until) continue; // named leader but it just failed for us: the others forward
        this._failed.delete(leader);
      }
      this._setTarget(leader);
      this._lastLearn = Date.now();
      return leader;
    }
    if (configErrors.length > 0 && configErrors.length === seen.size) throw configErrors[0];
    return null;
  }

  async _retry(deadline, unknownOK, attempt) {
    let backoff = BACKOFF_MIN;
    let unknown = false;
    const misconfigured = new Set();
    let refusedSince = null;
    let refusedHosts = new Set();
    const failFast = this.failFast !== null && Date.now() < this._downUntil ? 0 : this.failFast;
    for (;;) {
      const host = await this._pick(deadline);
      let err;
      try {
        const out = await attempt(host);
        this._downUntil = 0;
        return out;
      } catch (e) {
        err = e;
      }
      if (err instanceof ConfigError) {
        // Not worth a retry on this node; another configured node may be set up differently.
        if (misconfigured.has(host)) throw err;
        misconfigured.add(host);
        this._demote(host);
        if (misconfigured.size >= this._endpoints.length || Date.now() >= deadline) throw err;
        continue;
      }
      if (!(err instanceof TransportError) && !(err instanceof LimitdError && retryable(err))) throw err;
      const connectFailed = err instanceof TransportError && !err.sent;
      if (mayHaveCounted(err)) {
        unknown = true;
        if (!unknownOK) throw this._final(err, true, 'the request may have been counted and carries no request_id');
      }
      this._demote(host);
      const now = Date.now();
      if (connectFailed) {
        if (refusedSince === null) refusedSince = now;
        refusedHosts.add(host);
        if (failFast !== null && now - refusedSince >= failFast && this._endpoints.every((h) => refusedHosts.has(h))) {
          this._downUntil = now + FAILED_HOST_PAUSE;
          throw this._final(err, unknown, `every known node refused the connection for ${now - refusedSince} ms`);
        }
      } else {
        refusedSince = null;
        refusedHosts = new Set();
      }
      if (now >= deadline) throw this._final(err, unknown, 'deadline exceeded');
      await sleep(Math.max(0, Math.min(backoff * (0.5 + Math.random() / 2), deadline - now)));
      backoff = Math.min(backoff * 2, BACKOFF_MAX);
      if (Date.now() >= deadline) throw this._final(err, unknown, 'deadline exceeded');
      this.stats.retries++;
      await this._learnLeader(Math.min(deadline, Date.now() + LEARN_TIMEOUT)); // a ConfigError here: every node is misconfigured
    }
  }

  _final(last, unknown, why) {
    const Cls = unknown ? OutcomeUnknown : Unavailable;
    let msg = `${why} (last attempt: ${String(last.message).replace(/^limitd: /, '')})`;
    if (unknown) msg += '; it may have been counted';
    const e = new Cls(msg, { status: last.status || 0, retryAfter: last.retryAfter ?? null });
    e.cause = last instanceof TransportError ? last.cause : last;
    return e;
  }

  // One HTTP exchange: resolves to the body of a 2xx answer; a non-2xx
  // answer rejects with its typed error, no answer with a TransportError or
  // a ConfigError.
  _send(method, host, path, body, admin, deadline) {
    return new Promise((resolve, reject) => {
      const remaining = deadline - Date.now();
      if (remaining <= 0) {
        reject(new TransportError(host, false, new Error('deadline exceeded before sending')));
        return;
      }
      const headers = { Accept: 'application/json' };
      if (body !== null) {
        headers['Content-Type'] = 'application/json';
        headers['Content-Length'] = Buffer.byteLength(body);
      }
      if (admin && this.token) headers.Authorization = 'Bearer ' + this.token;
      const { hostname, port } = splitHostPort(host);
      let connected = false;
      let done = false;
      let connectTimer = null;
      const finish = (fn, v) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        clearTimeout(connectTimer);
        fn(v);
      };
      const req = this._mod.request({ hostname, port, method, path, headers, agent: this._agent });
      const timer = setTimeout(() => req.destroy(Object.assign(new Error(`no answer within the deadline`), { code: 'ETIMEDOUT' })), remaining);
      req.on('socket', (s) => {
        if (!s.connecting) {
          connected = true; // a kept-alive connection
          return;
        }
        connectTimer = setTimeout(() => req.destroy(Object.assign(new Error(`connect timeout after ${this.connectTimeout} ms`), { code: 'ECONNTIMEOUT' })),
          Math.min(this.connectTimeout, remaining));
        s.once(this._scheme === 'https' ? 'secureConnect' : 'connect', () => {
          connected = true;
          clearTimeout(connectTimer);
        });
      });
      req.on('error', (err) => {
        const kind = configKind(err, connected);
        if (kind) {
          finish(reject, new ConfigError(`${host}: ${kind}: ${err.message}`, { kind, addr: host, cause: err }));
          return;
        }
        finish(reject, new TransportError(host, connected, err));
      });
      req.on('response', (res) => {
        const chunks = [];
        let size = 0;
        res.on('data', (c) => {
          size += c.length;
          if (size > MAX_RESPONSE) {
            req.destroy(new Error('answer larger than 64 MiB'));
            return;
          }
          chunks.push(c);
        });
        res.on('error', (err) => finish(reject, new TransportError(host, true, err)));
        res.on('aborted', () => finish(reject, new TransportError(host, true, new Error('answer cut short'))));
        res.on('end', () => {
          const data = Buffer.concat(chunks).toString('utf8');
          const leader = res.headers['limitd-leader'];
          if (leader && leader !== host) this._followLeader(leader);
          if (Math.floor(res.statusCode / 100) !== 2) {
            if (res.statusCode === 400 && data.includes(TLS_REQUIRED_BODY)) {
              finish(reject, new ConfigError(`${host}: plain HTTP to a node that serves HTTPS`, { kind: 'tls_required', addr: host }));
              return;
            }
            finish(reject, decodeError(res, data));
            return;
          }
          finish(resolve, data);
        });
      });
      req.end(body === null ? undefined : body);
    });
  }
}

function decodeError(res, data) {
  let retryAfter = null;
  const ra = res.headers['retry-after'];
  if (ra && /^\s*\d+\s*$/.test(ra)) retryAfter = Number(ra);
  try {
    const e = JSON.parse(data).error;
    if (e && typeof e === 'object' && e.code) return errorFrom(e.code, e.field, e.message, res.statusCode, retryAfter);
  } catch (_) { /* not limitd's body */ }
  // Not limitd's error body (a proxy, a load balancer): keep the status.
  const code = [502, 503, 504].includes(res.statusCode) ? 'unavailable' : 'internal';
  return errorFrom(code, '', `HTTP ${res.statusCode}: ${data.trim().slice(0, 200)}`, res.statusCode, retryAfter);
}

module.exports = {
  Client,
  LimitdError,
  InvalidArgument,
  NotFound,
  Conflict,
  Unauthenticated,
  MethodNotAllowed,
  InternalError,
  Unavailable,
  OutcomeUnknown,
  ConfigError,
  NEVER,
  DEFAULT_TIMEOUT,
  DEFAULT_REFRESH_INTERVAL,
  DEFAULT_CONNECT_TIMEOUT,
  DEFAULT_FAIL_FAST,
};
