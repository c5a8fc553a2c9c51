package grpcapi

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/service"
)

// ErrorDomain is the ErrorInfo domain of limitd's errors.
const ErrorDomain = "limitd.dev"

// codeOf maps the service's error codes to gRPC codes: the one table.
// unavailable means nothing was counted (retry); outcome_unknown means it
// may have been (retry with the same request_id), so it is ABORTED, which
// clients do not retry blindly.
var codeOf = map[service.Code]codes.Code{
	service.CodeInvalidArgument: codes.InvalidArgument,
	service.CodeUnauthenticated: codes.Unauthenticated,
	service.CodeNotFound:        codes.NotFound,
	service.CodeConflict:        codes.AlreadyExists,
	service.CodePayloadTooLarge: codes.ResourceExhausted,
	service.CodeUnavailable:     codes.Unavailable,
	service.CodeOutcomeUnknown:  codes.Aborted,
	service.CodeInternal:        codes.Internal,
}

// toStatus renders a service error as a gRPC status error with an ErrorInfo
// (reason: the service code) and, when a field is named, a BadRequest.
func toStatus(e *service.Error) error {
	c, ok := codeOf[e.Code]
	if !ok {
		c = codes.Internal
	}
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	st := status.New(c, msg)
	info := &errdetails.ErrorInfo{Reason: string(e.Code), Domain: ErrorDomain}
	var err error
	if e.Field != "" {
		st, err = st.WithDetails(info, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: e.Field, Description: e.Message}}})
	} else {
		st, err = st.WithDetails(info)
	}
	if err != nil {
		return status.New(c, msg).Err()
	}
	return st.Err()
}

// contextError renders a context error the way gRPC clients expect.
func contextError(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return nil
}

// nodeError maps an error of a domain operation on the node to a service
// error, as the service maps its own operations' errors. (The service layer
// has no domain operations yet; when it gets them, this goes.)
func nodeError(err error) *service.Error {
	var fe *fsm.Error
	switch {
	case errors.As(err, &fe) && fe.Code != "":
		return fe
	case errors.Is(err, cluster.ErrOutcomeUnknown):
		return &service.Error{Code: service.CodeOutcomeUnknown,
			Message: "leadership changed while the request was in flight, so it may or may not have been applied; retry"}
	case errors.Is(err, cluster.ErrNoLeader), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &service.Error{Code: service.CodeUnavailable, Message: "the cluster did not answer: " + err.Error() + "; retry (putting or deleting a domain again is safe)"}
	}
	return service.Internal(err.Error())
}
