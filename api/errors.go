package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/limitd/limitd/service"
	"github.com/limitd/limitd/wire"
)

// Error codes, the "code" member of every error body. Clients switch on these,
// so they are part of the API: never rename one. All but method_not_allowed
// are the service's codes (defined once, in nodeapi), shared with gRPC.
const (
	CodeInvalidArgument  = string(service.CodeInvalidArgument) // 400: the request is malformed; field names what
	CodeUnauthenticated  = string(service.CodeUnauthenticated) // 401: admin endpoint without the right bearer token
	CodeNotFound         = string(service.CodeNotFound)        // 404: unknown policy, route or node
	CodeMethodNotAllowed = "method_not_allowed"                // 405: see the Allow header
	CodeConflict         = string(service.CodeConflict)        // 409: request_id already used for a different request
	CodePayloadTooLarge  = string(service.CodePayloadTooLarge) // 413: body over the limit
	CodeUnavailable      = string(service.CodeUnavailable)     // 503: no leader, or no answer in time
	CodeOutcomeUnknown   = string(service.CodeOutcomeUnknown)  // 503: may have been applied; retry with the same request_id
	CodeInternal         = string(service.CodeInternal)        // 500: a bug; the message says what
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

// serviceError is e as the service's error (for errors found while decoding
// that travel with the service's, such as a batch entry's).
func (e *apiError) serviceError() *service.Error {
	return &service.Error{Code: service.Code(e.code), Field: e.field, Message: e.message}
}

// httpError maps a service error to its answer (nil for nil) by the
// service's one table (service.AnswerOf, shared with gRPC and POST /json).
// Answers a client may retry carry Retry-After.
func (s *Server) httpError(e *service.Error) *apiError {
	if e == nil {
		return nil
	}
	ans := service.AnswerOf(e.Code)
	a := &apiError{status: ans.HTTPStatus, code: string(e.Code), field: e.Field, message: e.Message}
	if ans.RetryAfter {
		a.retryAfter = s.cfg.NoLeaderRetryAfter
	}
	return a
}

func invalid(field, message string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: CodeInvalidArgument, field: field, message: message}
}

func internalError(format string, args ...any) *apiError {
	return &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: fmt.Sprintf(format, args...)}
}

// writeError writes e as {"error":{...}} with its status and headers.
func writeError(w http.ResponseWriter, e *apiError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", service.RetryAfterValue(e.retryAfter))
	}
	buf := getBuffer()
	b := wire.AppendErrorBody(buf.b[:0], e.code, clip(e.field, maxErrorField), clip(e.message, maxErrorMessage)) // clip.go
	b = append(b, '\n')
	errorCode(w, e.code)
	writeJSON(w, e.status, b)
	buf.b = b
	putBuffer(buf)
}

func joinField(prefix, field string) string { return wire.JoinField(prefix, field) }

// scanJSON refuses a request body with invalid UTF-8 or a repeated member
// before it is decoded (wire.ScanRequest), naming the field.
func scanJSON(data []byte, prefix string, fold bool, only int) *apiError {
	if e := wire.ScanRequest(data, prefix, fold, only); e != nil {
		return invalid(e.Field, e.Message)
	}
	return nil
}

// ceilDiv is a/b rounded up for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}
