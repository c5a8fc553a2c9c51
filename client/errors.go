package client

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Error codes the server sends (docs/API.md, "Errors"). Switch on Code, not
// on Message, whose wording may change.
const (
	CodeInvalidArgument  = "invalid_argument"
	CodeUnauthenticated  = "unauthenticated"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeConflict         = "conflict"
	CodePayloadTooLarge  = "payload_too_large"
	CodeUnavailable      = "unavailable"
	CodeOutcomeUnknown   = "outcome_unknown"
	CodeInternal         = "internal"
	// The server refuses a new key (or request id) past the cluster's or a
	// policy's key budget: nothing was counted; existing keys are decided.
	CodeKeyBudgetExhausted = "key_budget_exhausted"
	// The browser guard (docs/SECURITY.md, "Browsers cannot act on a node").
	CodeForbidden            = "forbidden"
	CodeUnsupportedMediaType = "unsupported_media_type"
)

// Sentinel errors for errors.Is. An *Error matches the sentinel of its code;
// transport failures and deadlines reached while the cluster did not answer
// match ErrUnavailable.
var (
	// ErrUnavailable: no node answered with a decision before the deadline
	// (no leader, connection refused, timeouts). Nothing may be assumed about a
	// check that failed this way unless it also matches ErrOutcomeUnknown's
	// negation; the client already retried it with the same request_id.
	ErrUnavailable = errors.New("limitd: unavailable")
	// ErrOutcomeUnknown: the last attempt may have been counted (leadership
	// changed while it was in flight, or the connection was lost after sending)
	// and the deadline passed before a retry with the same request_id could
	// tell. It also matches ErrUnavailable.
	ErrOutcomeUnknown = errors.New("limitd: outcome unknown")
	// ErrInvalidArgument: the request is malformed; *Error.Field names what.
	ErrInvalidArgument = errors.New("limitd: invalid argument")
	// ErrNotFound: unknown policy, key route or node.
	ErrNotFound = errors.New("limitd: not found")
	// ErrUnauthenticated: an admin call without the right token (WithToken).
	ErrUnauthenticated = errors.New("limitd: unauthenticated")
	// ErrConflict: a request_id reused for a different request (another key,
	// policy, limit, cost or number of checks); Error.Field names what differs.
	ErrConflict = errors.New("limitd: conflict")
)

// Error is an error answered by a limitd node: its HTTP status and the
// `{"error":{"code","field","message"}}` body.
type Error struct {
	Status  int    // HTTP status, e.g. 400
	Code    string // e.g. CodeInvalidArgument
	Field   string // JSON path of the offending value, e.g. "limit.window"; may be empty
	Message string
	// RetryAfter is the server's Retry-After on 503s.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("limitd: ")
	b.WriteString(e.Code)
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Is matches the sentinel of the error's code.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrUnavailable:
		return e.Code == CodeUnavailable || e.Code == CodeOutcomeUnknown
	case ErrOutcomeUnknown:
		return e.Code == CodeOutcomeUnknown
	case ErrInvalidArgument:
		return e.Code == CodeInvalidArgument || e.Code == CodePayloadTooLarge
	case ErrNotFound:
		return e.Code == CodeNotFound
	case ErrUnauthenticated:
		return e.Code == CodeUnauthenticated
	case ErrConflict:
		return e.Code == CodeConflict
	}
	return false
}

// retryable reports whether err may be retried with the same request_id:
// the server said 503, or the request did not get an answer.
func retryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Code == CodeUnavailable || e.Code == CodeOutcomeUnknown || e.Status == http.StatusServiceUnavailable ||
			e.Status == http.StatusBadGateway || e.Status == http.StatusGatewayTimeout
	}
	var te *transportError
	return errors.As(err, &te)
}

// transportError is a request that got no HTTP answer. sent says whether the
// request may have reached the server (then its outcome is unknown).
type transportError struct {
	addr string
	sent bool
	err  error
}

// Error names the node and the cause, not the request's URL: the caller
// knows which operation it asked for, and the path it went by (a check
// coalesced into /v1/check/batch) would only mislead.
func (e *transportError) Error() string {
	err := e.err
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Sprintf("limitd: %s: %v", e.addr, err)
}
func (e *transportError) Unwrap() error { return e.err }
func (e *transportError) Is(target error) bool {
	return target == ErrUnavailable || (e.sent && target == ErrOutcomeUnknown)
}

// mayHaveCounted reports whether a failed attempt may have been applied.
func mayHaveCounted(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Code == CodeOutcomeUnknown || (e.Status >= 500 && e.Code != CodeUnavailable)
	}
	var te *transportError
	if errors.As(err, &te) {
		return te.sent
	}
	return false
}

// deadlineError is returned when the caller's deadline ends the retries: it
// wraps the context error and the last failure, and matches ErrUnavailable
// (and ErrOutcomeUnknown when some attempt may have been counted).
type deadlineError struct {
	ctxErr  error
	last    error
	unknown bool
	// notCheck: the call was an admin write, not a check; its unknown
	// outcome is "applied", not "counted".
	notCheck bool
}

func (e *deadlineError) Error() string {
	s := "limitd: unavailable: " + e.ctxErr.Error()
	if e.last != nil {
		s += " (last attempt: " + strings.TrimPrefix(e.last.Error(), "limitd: ") + ")"
	}
	if e.unknown {
		s += "; " + mayHave(e.notCheck)
	}
	return s
}

// mayHave words an unknown outcome: a check may have been counted, any
// other write (a policy, a membership change) applied.
func mayHave(notCheck bool) string {
	if notCheck {
		return "it may have been applied"
	}
	return "it may have been counted"
}

// markNotCheck makes err, when it reports an unknown outcome, word it for a
// call that is not a check.
func markNotCheck(err error) {
	var de *deadlineError
	if errors.As(err, &de) {
		de.notCheck = true
	}
	var ue *unreachableError
	if errors.As(err, &ue) {
		ue.notCheck = true
	}
}

func (e *deadlineError) Unwrap() []error {
	if e.last != nil {
		return []error{e.ctxErr, e.last}
	}
	return []error{e.ctxErr}
}

func (e *deadlineError) Is(target error) bool {
	return target == ErrUnavailable || (e.unknown && target == ErrOutcomeUnknown)
}

// ErrConfig: the client, as configured, cannot talk to the node, and
// retrying will not help: a certificate the client does not trust or that
// is not valid for the address, HTTPS to a plain-HTTP node or the reverse, a
// host name that does not resolve, a client certificate the node refuses.
// The client does not retry it (it goes on to the other configured nodes,
// if any); errors.As gives the *ConfigError, whose Kind says what to fix. It
// does not match ErrUnavailable: the cluster may be fine.
var ErrConfig = errors.New("limitd: configuration error")

// ConfigError is a failure to reach a node that is the client's (or the
// node's) configuration, not the node's availability.
type ConfigError struct {
	Addr string     // the node, host:port
	Kind ConfigKind // what is wrong
	Err  error      // the underlying TLS, DNS or HTTP error
}

// ConfigKind classifies a ConfigError.
type ConfigKind string

// Kinds of ConfigError.
const (
	ConfigUnknownAuthority ConfigKind = "unknown_authority"   // the node's certificate is signed by a CA the client does not trust (WithTLS RootCAs)
	ConfigHostname         ConfigKind = "hostname"            // the node's certificate is not valid for the address used
	ConfigBadCertificate   ConfigKind = "invalid_certificate" // the node's certificate is expired or otherwise invalid
	ConfigNotTLS           ConfigKind = "not_tls"             // HTTPS to a node that serves plain HTTP
	ConfigTLSRequired      ConfigKind = "tls_required"        // plain HTTP to a node that serves HTTPS
	ConfigUnknownHost      ConfigKind = "unknown_host"        // the host name does not resolve
	ConfigClientCert       ConfigKind = "client_certificate"  // the node refused (or wanted) the client's certificate
)

func (e *ConfigError) Error() string {
	return fmt.Sprintf("limitd: %s: %s: %v", e.Addr, e.Kind, e.Err)
}
func (e *ConfigError) Unwrap() error        { return e.Err }
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// configKind classifies an error of http.Client.Do as a configuration
// error, or returns "" when it may be transient.
func configKind(err error) ConfigKind {
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var dns *net.DNSError
	switch {
	case errors.As(err, &ua):
		return ConfigUnknownAuthority
	case errors.As(err, &he):
		return ConfigHostname
	case errors.As(err, &ci):
		return ConfigBadCertificate
	case errors.As(err, &dns) && dns.IsNotFound:
		return ConfigUnknownHost
	}
	// net/http and crypto/tls report these as text only.
	msg := err.Error()
	switch {
	case strings.Contains(msg, "server gave HTTP response to HTTPS client"):
		return ConfigNotTLS
	case strings.Contains(msg, "remote error: tls: certificate required"),
		strings.Contains(msg, "remote error: tls: bad certificate"),
		strings.Contains(msg, "remote error: tls: unknown certificate authority"):
		return ConfigClientCert
	}
	return ""
}

// tlsRequiredBody is what Go's HTTPS server answers a plain-HTTP request.
const tlsRequiredBody = "Client sent an HTTP request to an HTTPS server"
