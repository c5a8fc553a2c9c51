package grpcapi

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
