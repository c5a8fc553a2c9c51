package grpcapi

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"github.com/limitd/limitd/service"
)

// ErrorDomain is the ErrorInfo domain of limitd's errors.
const ErrorDomain = "limitd.dev"

// toStatus renders a service error as a gRPC status error with an ErrorInfo
// (reason: the service code) and, when a field is named, a BadRequest. The
// gRPC code is the service's one table's (service.AnswerOf).
func toStatus(e *service.Error) error {
	c := service.AnswerOf(e.Code).GRPC
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
