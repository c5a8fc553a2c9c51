package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/fsm"
)

// Error codes, the "code" member of every error body. Clients switch on these,
// so they are part of the API: never rename one.
const (
	CodeInvalidArgument  = "invalid_argument"   // 400: the request is malformed; field names what
	CodeUnauthenticated  = "unauthenticated"    // 401: admin endpoint without the right bearer token
	CodeNotFound         = "not_found"          // 404: unknown policy, route or node
	CodeMethodNotAllowed = "method_not_allowed" // 405: see the Allow header
	CodeConflict         = "conflict"           // 409: request_id already used for a different request
	CodePayloadTooLarge  = "payload_too_large"  // 413: body over the limit
	CodeUnavailable      = "unavailable"        // 503: no leader, or no answer in time
	CodeOutcomeUnknown   = "outcome_unknown"    // 503: may have been applied; retry with the same request_id
	CodeInternal         = "internal"           // 500: a bug; the message says what
)

// apiError is an error answer: an HTTP status and the JSON error body.
type apiError struct {
	status     int
	code       string
	field      string
	message    string
	retryAfter time.Duration // sets Retry-After when > 0
}

func (e *apiError) Error() string {
	if e.field == "" {
		return e.code + ": " + e.message
	}
	return e.code + ": " + e.field + ": " + e.message
}

// under locates the error's field inside prefix ("checks[2]").
func (e *apiError) under(prefix string) *apiError {
	e.field = joinField(prefix, e.field)
	return e
}

func invalid(field, message string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: CodeInvalidArgument, field: field, message: message}
}

func internalError(format string, args ...any) *apiError {
	return &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: fmt.Sprintf(format, args...)}
}

// conflictRequestID answers a replayed request_id whose stored result has a
// different shape than this request (the id was used for another request).
func conflictRequestID(field string) *apiError {
	return &apiError{status: http.StatusConflict, code: CodeConflict, field: field,
		message: "this request_id was already used for a request with a different number of checks; use a new id"}
}

// appendError appends the JSON error object {"code":..,"field":..,"message":..}
// (field omitted when empty).
func appendError(b []byte, code, field, message string) []byte {
	b = append(b, `{"code":`...)
	b = appendString(b, code)
	if field != "" {
		b = append(b, `,"field":`...)
		b = appendString(b, field)
	}
	b = append(b, `,"message":`...)
	b = appendString(b, message)
	return append(b, '}')
}

// writeError writes e as {"error":{...}} with its status and headers.
func writeError(w http.ResponseWriter, e *apiError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(ceilDiv(int64(e.retryAfter), int64(time.Second)), 10))
	}
	buf := getBuffer()
	b := append(buf.b[:0], `{"error":`...)
	b = appendError(b, e.code, e.field, e.message)
	b = append(b, '}', '\n')
	writeJSON(w, e.status, b)
	buf.b = b
	putBuffer(buf)
}

// fsmError maps an error decided inside the state machine to an answer.
// prefix locates the check in the request ("checks[2]"), "" for a single one.
func fsmError(e *fsm.Error, prefix string) *apiError {
	status := http.StatusBadRequest
	switch string(e.Code) {
	case CodeNotFound:
		status = http.StatusNotFound
	case CodeInvalidArgument:
	default:
		status = http.StatusInternalServerError
	}
	code := string(e.Code)
	if code == "" {
		code = CodeInternal
	}
	return &apiError{status: status, code: code, field: joinField(prefix, e.Field), message: e.Message}
}

// storeError maps an error from the Store (not a per-op decision) to an answer.
// The two 503s differ in what a client may do: unavailable means nothing was
// proposed (or we cannot tell and the client's request_id makes a retry safe),
// outcome_unknown means it may have been counted.
func (s *Server) storeError(err error) *apiError {
	retry := s.cfg.NoLeaderRetryAfter
	var fe *fsm.Error
	switch {
	case errors.As(err, &fe):
		return fsmError(fe, "")
	case errors.Is(err, cluster.ErrOutcomeUnknown):
		return &apiError{status: http.StatusServiceUnavailable, code: CodeOutcomeUnknown, retryAfter: retry,
			message: "leadership changed while the request was in flight, so it may or may not have been counted; " +
				"retry with the same request_id to get the original decision without counting it twice"}
	case errors.Is(err, cluster.ErrNoLeader):
		return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable, retryAfter: retry,
			message: "no raft leader is available; nothing was counted, retry shortly"}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable, retryAfter: retry,
			message: "the cluster did not answer within " + s.cfg.RequestTimeout.String() +
				"; retry with the same request_id to avoid counting it twice"}
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads this answer, but keep it truthful.
		return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable, retryAfter: retry,
			message: "request canceled"}
	default:
		return &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: err.Error()}
	}
}

func joinField(prefix, field string) string {
	switch {
	case prefix == "":
		return field
	case field == "":
		return prefix
	default:
		return prefix + "." + field
	}
}

// ceilDiv is a/b rounded up for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}
