// Package client is the Go client of limitd: it owns talking to a cluster
// over the HTTP API of docs/API.md (leader discovery, retries, coalescing)
// and the net/http middleware built on it.
//
// Three lines add limitd to a service:
//
//	c, err := client.New([]string{"10.0.0.1:8080", "10.0.0.2:8080"})
//	d, err := c.Check(ctx, client.Request{Key: "user:42", Policy: "api"})
//	if !d.Allowed { /* refuse, retry after d.RetryAfter */ }
//
// What the client does for the caller:
//
//   - Leader-aware: it learns the leader from GET /v1/cluster (and the
//     members' addresses, so failover reaches nodes that were not
//     configured), sends to it directly, re-learns it periodically and at the
//     first failure, and fails over across the nodes it knows.
//   - Exactly once from the caller's view: every check carries a request_id
//     (generated unless given); an attempt that got no answer or a 503
//     (unavailable or outcome_unknown) is retried with the same id until the
//     context's deadline (WithTimeout when it has none). The server stores
//     the first decision per id, so a retry never counts twice, and a
//     returned decision was counted exactly once. An error matching
//     ErrOutcomeUnknown says the check may have been counted.
//   - Coalescing: concurrent Check calls are merged into /v1/check/batch
//     requests (at most MaxInflight in flight, MaxBatch checks each, natural
//     batching or a bounded MaxWait; see Coalescing). Each caller still gets
//     its own decision and error.
//   - Fail mode: FailError (default), FailOpen or FailClosed when the
//     cluster cannot decide; Stats counts the degraded answers.
//   - Fail fast in an outage (Breaker, WithBreaker): a refused connection
//     fails over to the next known node at once, and a call ends at once
//     when every known node refused it. After 3 consecutive calls that
//     reached no node (DefaultBreakerFailures) the breaker opens: calls
//     return an error matching ErrUnavailable (or the fail mode's answer)
//     without touching the network, and one call per second
//     (DefaultBreakerInterval) probes, for at most a second
//     (DefaultBreakerProbeTimeout). What a check costs in an outage: at most
//     one probe per interval; every other check answers in microseconds.
//     Any HTTP answer closes the breaker. A cluster that answers 503 (no
//     leader) is not an outage to the breaker: those checks retry until
//     their deadline, as exactly-once needs.
//
// Errors are *Error values for what a node answered (errors.Is against
// ErrInvalidArgument, ErrNotFound, ErrUnauthenticated, ErrConflict,
// ErrUnavailable, ErrOutcomeUnknown; Field names the offending value),
// errors matching ErrUnavailable when no node answered in time, and a
// *ConfigError (ErrConfig) when the client's configuration keeps it from
// every node — an untrusted certificate, HTTP vs HTTPS, an unknown host —
// which is returned at once, not retried until the deadline.
package client
