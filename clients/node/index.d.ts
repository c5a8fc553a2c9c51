// Types of the limitd client (index.js, CommonJS; `import { Client } from 'limitd'` works from ESM too).

/** Retry-after of a request that can never be allowed (its cost exceeds the limit or the burst). */
export const NEVER: -1;
export const DEFAULT_TIMEOUT: number;
export const DEFAULT_REFRESH_INTERVAL: number;
export const DEFAULT_CONNECT_TIMEOUT: number;
export const DEFAULT_FAIL_FAST: number;

export type Algorithm = 'fixed_window' | 'sliding_log' | 'sliding_window' | 'token_bucket' | 'leaky_bucket';

/** A limit, with the HTTP API's field names (docs/API.md, "Limits"). */
export interface Limit {
  algorithm: Algorithm;
  /** Requests (cost units) per window; for the buckets, the rate. */
  limit: number;
  /** "500ms", "60s", "1h30m", "7d"; left out for calendar windows. */
  window?: string;
  /** token_bucket / leaky_bucket capacity (default: limit). */
  burst?: number;
  /** sliding_log only: refused requests are logged too. */
  count_refused?: boolean;
  /** fixed_window only. */
  calendar?: 'day' | 'week' | 'month';
  /** With calendar: an IANA zone (default UTC). */
  timezone?: string;
}

/** A policy as the HTTP API has it: a named limit. Unknown fields are kept on a get-modify-put. */
export interface Policy extends Limit {
  name: string;
  /** Checks always answer allowed, reporting shadowRefused instead. */
  shadow?: boolean;
  /** Refusals answered from every node's over-limit cache (default true). */
  local_refusals?: boolean;
  /** Quota leases (docs/API.md, "Leases"); left out: none. */
  lease?: { share?: number; max_ttl?: string; strict?: boolean };
  [field: string]: unknown;
}

/** One check. Exactly one of policy and limit. */
export interface CheckRequest {
  /** What is limited: a user id, an API key, an IP... */
  key: string;
  policy?: string;
  limit?: Limit;
  /** How much to spend (default 1); 0 is a peek. */
  cost?: number;
  /** Makes the check idempotent; left out, the client generates one. */
  requestId?: string;
}

export interface CallOptions {
  /** Milliseconds the call may take, retries included (default: the client's timeout). */
  timeout?: number;
}

export interface Decision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Time until the key is back to its fresh state if nothing more arrives. */
  resetAfterMs: number;
  /** When refused, time until the same request would be allowed; 0 when allowed; NEVER (-1) when it can never be. */
  retryAfterMs: number;
  /** leaky_bucket only: how long to wait before proceeding. */
  delayMs: number;
  /** A shadow policy would have refused. */
  shadowRefused: boolean;
  /** The stored decision of an earlier request with the same request id. */
  replayed: boolean;
  /** Why a list or a ban answered the check: "allowed", "denied", "banned"; "" for the limit's decision. */
  reason: string;
  /** The cluster could not be reached: the client's fail mode decided. */
  degraded: boolean;
}

export interface AllResult {
  /** Allowed only if every check allowed; then all were consumed, otherwise none was. */
  allowed: boolean;
  results: Decision[];
  replayed: boolean;
  degraded: boolean;
}

export interface BatchResult {
  decision: Decision | null;
  /** That entry's own error (field relative to the check, e.g. "key"). */
  error: LimitdError | null;
}

export interface ClusterMember {
  id: string;
  http_addr: string;
  raft_addr?: string;
  suffrage?: string;
  leader: boolean;
  health?: string;
  healthy?: boolean;
}

export interface ClusterStatus {
  node_id?: string;
  state: string;
  leader_id: string;
  leader_http_addr: string;
  term?: number;
  commit_index?: number;
  applied_index?: number;
  members: ClusterMember[];
  [field: string]: unknown;
}

export type FailMode = 'error' | 'open' | 'closed';

export interface ClientOptions {
  /** Admin token, sent as "Authorization: Bearer <token>" on admin calls. */
  token?: string;
  /** Milliseconds a call may take, retries included (default 10000). */
  timeout?: number;
  /** What check/checkAll answer when no decision came in time (default 'error': throw Unavailable). */
  failMode?: FailMode;
  /** Milliseconds after which a call gives up when every known node refuses connections (default 500; null: never); for a second after, calls give up after one round. */
  failFast?: number | null;
  /** Milliseconds for one TCP (and TLS) connect (default 2000). */
  connectTimeout?: number;
  /** PEM CA bundle to verify the nodes with (https), or its file. */
  ca?: string | Uint8Array;
  caFile?: string;
  /** Client certificate and key (mutual TLS), or their files. */
  cert?: string | Uint8Array;
  certFile?: string;
  key?: string | Uint8Array;
  keyFile?: string;
  /** false: no generated request ids (an unknown outcome then throws OutcomeUnknown, unretried). */
  requestIds?: boolean;
  /** Milliseconds between leader refreshes while nothing fails (default 5000). */
  refreshInterval?: number;
}

export interface ClientStats {
  checks: number;
  retries: number;
  failedOpen: number;
  failedClosed: number;
  leaderChanges: number;
}

export class Client {
  /** addrs: "host:port", "http://host:port" or "https://host:port" (an array, or one string with commas). */
  constructor(addrs: string | string[], opts?: ClientOptions);
  /** The node the client sends to now (the leader once learned), or null. */
  readonly target: string | null;
  /** Every node the client knows. */
  readonly endpoints: string[];
  readonly stats: ClientStats;
  /** POST /v1/check, retried with the same request id until the deadline. */
  check(req: CheckRequest, opts?: CallOptions): Promise<Decision>;
  /** POST /v1/check/all: atomic; one request id (generated unless given) covers the whole step. */
  checkAll(checks: Omit<CheckRequest, 'requestId'>[], opts?: CallOptions & { requestId?: string }): Promise<AllResult>;
  /** POST /v1/check/batch: independent checks, each with its decision or its own error. */
  batch(checks: CheckRequest[], opts?: CallOptions): Promise<BatchResult[]>;
  /** GET /v1/keys/{key}: the key's state, consuming nothing. */
  peek(key: string, opts: CallOptions & ({ policy: string; limit?: undefined } | { limit: Limit; policy?: undefined })): Promise<Decision>;
  /** DELETE /v1/keys/{key} (admin). */
  reset(key: string, opts: CallOptions & ({ policy: string; limit?: undefined } | { limit: Limit; policy?: undefined })): Promise<void>;
  /** PUT /v1/policies/{name} (admin): resolves to the policy as stored. */
  putPolicy(policy: Policy, opts?: CallOptions): Promise<Policy>;
  getPolicy(name: string, opts?: CallOptions): Promise<Policy>;
  listPolicies(opts?: CallOptions): Promise<Policy[]>;
  /** DELETE /v1/policies/{name} (admin); NotFound when there is none. */
  deletePolicy(name: string, opts?: CallOptions): Promise<void>;
  /** GET /v1/cluster through the leader (the admin view with the token). */
  cluster(opts?: CallOptions): Promise<ClusterStatus>;
  /** Closes the keep-alive connections. */
  close(): void;
}

/** Base class of the client's errors; for a server's error, its code, field and message. */
export class LimitdError extends Error {
  constructor(serverMessage?: string, opts?: { code?: string; field?: string; status?: number; retryAfter?: number | null });
  /** The server's code: invalid_argument, not_found, conflict, unauthenticated, unavailable, outcome_unknown, ... */
  readonly code: string;
  /** JSON path of the offending value, e.g. "limit.window"; "" when about the request as a whole. */
  readonly field: string;
  /** The server's message (message is "limitd: code: field: serverMessage"). */
  readonly serverMessage: string;
  /** HTTP status (0 when there was no answer). */
  readonly status: number;
  /** The server's Retry-After in seconds, or null. */
  readonly retryAfter: number | null;
}
export class InvalidArgument extends LimitdError {}
export class NotFound extends LimitdError {}
export class Conflict extends LimitdError {}
export class Unauthenticated extends LimitdError {}
export class MethodNotAllowed extends LimitdError {}
export class InternalError extends LimitdError {}
export class Unavailable extends LimitdError {}
export class OutcomeUnknown extends Unavailable {}
export type ConfigKind = 'unknown_authority' | 'hostname' | 'invalid_certificate' | 'not_tls' | 'tls_required' | 'unknown_host' | 'client_certificate';
export class ConfigError extends LimitdError {
  readonly kind: ConfigKind;
  /** The node, host:port. */
  readonly addr: string;
}
