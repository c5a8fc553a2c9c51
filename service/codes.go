package service

import (
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/limitd/limitd/nodeapi"
)

// Answer is how one Code is answered on every transport: the one table
// from the service's codes to HTTP statuses, gRPC codes and Retry-After,
// used by the HTTP API, the gRPC server and POST /json alike, so that a
// refusal reads the same whichever door it came through.
type Answer struct {
	HTTPStatus int
	GRPC       codes.Code
	// RetryAfter: nothing was decided (or the outcome is unknown) and a
	// retry may succeed, so HTTP answers carry Retry-After.
	RetryAfter bool
}

// answers is the table. unavailable means nothing was counted (retry);
// outcome_unknown means it may have been (retry with the same request_id),
// so on gRPC it is ABORTED, which clients do not retry blindly.
var answers = map[Code]Answer{
	CodeInvalidArgument: {http.StatusBadRequest, codes.InvalidArgument, false},
	CodeUnauthenticated: {http.StatusUnauthorized, codes.Unauthenticated, false},
	CodeNotFound:        {http.StatusNotFound, codes.NotFound, false},
	CodeConflict:        {http.StatusConflict, codes.AlreadyExists, false},
	CodePayloadTooLarge: {http.StatusRequestEntityTooLarge, codes.ResourceExhausted, false},
	CodeUnavailable:     {http.StatusServiceUnavailable, codes.Unavailable, true},
	CodeOutcomeUnknown:  {http.StatusServiceUnavailable, codes.Aborted, true},
	CodeInternal:        {http.StatusInternalServerError, codes.Internal, false},
	// key_budget_exhausted is 429, not 503: 503 here means "no leader or
	// no answer in time, retry (elsewhere)", which clients and proxies
	// retry on another node that shares the same replicated budget, and
	// which load balancers take for a sick node. The refusal is a quota
	// on new keys, decided and counted nothing; Retry-After because keys
	// expiring make room again.
	CodeKeyBudgetExhausted: {http.StatusTooManyRequests, codes.ResourceExhausted, true},
	// cross_slot is 409 / FAILED_PRECONDITION: the request is well formed
	// but cannot be atomic on this cluster's layout; the same request with
	// its keys under one {tag} succeeds, a retry as is never does.
	CodeCrossSlot: {http.StatusConflict, codes.FailedPrecondition, false},
	// wrong_group is 421 Misdirected Request: the check reached a group
	// that does not own the key's hash slot (a stale slot map). Not 409,
	// which says the request conflicts with state: here it is fine, sent
	// to the wrong place. No Retry-After: the same retry fails until the
	// sender refreshes its map. gRPC FAILED_PRECONDITION likewise.
	nodeapi.CodeWrongGroup: {http.StatusMisdirectedRequest, codes.FailedPrecondition, false},
	// slot_moving is 503 with Retry-After: nothing was counted and the
	// slot is owned again within a move's two entries.
	nodeapi.CodeSlotMoving: {http.StatusServiceUnavailable, codes.Unavailable, true},
}

// Codes lists every code the service answers with, in the order above.
func Codes() []Code {
	return []Code{CodeInvalidArgument, CodeUnauthenticated, CodeNotFound, CodeConflict,
		CodePayloadTooLarge, CodeUnavailable, CodeOutcomeUnknown, CodeInternal, CodeKeyBudgetExhausted, CodeCrossSlot,
		nodeapi.CodeWrongGroup, nodeapi.CodeSlotMoving}
}

// AnswerOf is how code is answered. A code missing from the table (a bug)
// is answered as internal.
func AnswerOf(code Code) Answer {
	if a, ok := answers[code]; ok {
		return a
	}
	return answers[CodeInternal]
}

// DefaultRetryAfter is the wait front ends suggest with Retry-After.
const DefaultRetryAfter = time.Second

// RetryAfterValue is d as a Retry-After header value: whole seconds,
// rounded up (a client must not come back sooner than d).
func RetryAfterValue(d time.Duration) string {
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return strconv.FormatInt(s, 10)
}
