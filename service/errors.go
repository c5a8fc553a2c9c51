package service

import (
	"context"
	"errors"

	"github.com/limitd/limitd/nodeapi"
)

// Error is the one error type of every operation: a Code, the Field of the
// request it is about (a JSON path such as "checks[2].limit.window", empty
// for the request as a whole) and a Message for people. It is nodeapi.Error, so
// that a refusal decided inside the state machine reaches clients unchanged.
type Error = nodeapi.Error

// Code classifies an Error; front ends map it to their status codes
// (HTTP: api's table, gRPC: codes.InvalidArgument, NotFound, ...).
type Code = nodeapi.Code

// The codes, as defined by nodeapi. Clients switch on them: never rename one.
const (
	CodeInvalidArgument = nodeapi.CodeInvalidArgument
	CodeUnauthenticated = nodeapi.CodeUnauthenticated
	CodeNotFound        = nodeapi.CodeNotFound
	CodeConflict        = nodeapi.CodeConflict
	CodePayloadTooLarge = nodeapi.CodePayloadTooLarge
	CodeUnavailable     = nodeapi.CodeUnavailable
	CodeOutcomeUnknown  = nodeapi.CodeOutcomeUnknown
	CodeInternal        = nodeapi.CodeInternal
	// CodeKeyBudgetExhausted: a new key (or request id) past the cluster's
	// bounds; nothing was counted (fsm/budget.go).
	CodeKeyBudgetExhausted = nodeapi.CodeKeyBudgetExhausted
	// CodeCrossSlot: check/all across hash slots with data groups (hashslots.go).
	CodeCrossSlot = nodeapi.CodeCrossSlot
)

// Invalid returns an invalid_argument error about field.
func Invalid(field, message string) *Error {
	return &Error{Code: CodeInvalidArgument, Field: field, Message: message}
}

// Internal returns an internal error: a bug, which message describes.
func Internal(message string) *Error {
	return &Error{Code: CodeInternal, Message: message}
}

// conflictRequestID answers a replayed request_id whose stored result has a
// different shape than this request (the id was used for another request).
func conflictRequestID(field string) *Error {
	return &Error{Code: CodeConflict, Field: field,
		Message: "this request_id was already used for a request with a different number of checks; use a new id"}
}

// fromNode maps an error returned by a Node to an Error. The two 503-class
// codes differ in what a client may do: unavailable means nothing was
// proposed (or a retry with the same request_id is safe), outcome_unknown
// means the request may have been counted. timeout is the wait the service
// allowed, named in the message.
func fromNode(err error, timeout string) *Error {
	var fe *nodeapi.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		if fe.Code == "" {
			return &Error{Code: CodeInternal, Field: fe.Field, Message: fe.Message}
		}
		return fe
	case errors.Is(err, nodeapi.ErrOutcomeUnknown):
		return &Error{Code: CodeOutcomeUnknown,
			Message: "leadership changed while the request was in flight, so it may or may not have been counted; " +
				"retry with the same request_id to get the original decision without counting it twice"}
	case errors.Is(err, nodeapi.ErrTooLarge):
		return &Error{Code: CodePayloadTooLarge, Message: err.Error() + "; send fewer or smaller checks per request"}
	case errors.Is(err, nodeapi.ErrUnavailable):
		// Before ErrNoLeader, which it also matches: the message names the
		// cause (a halted state machine, a failed disk, a removal).
		return &Error{Code: CodeUnavailable, Message: err.Error() + "; nothing was counted"}
	case errors.Is(err, nodeapi.ErrNoLeader):
		return &Error{Code: CodeUnavailable, Message: "no raft leader is available; nothing was counted, retry shortly"}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: CodeUnavailable, Message: "the cluster did not answer within " + timeout +
			"; retry with the same request_id to avoid counting it twice"}
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads this answer, but keep it truthful.
		return &Error{Code: CodeUnavailable, Message: "request canceled"}
	default:
		return &Error{Code: CodeInternal, Message: err.Error()}
	}
}
