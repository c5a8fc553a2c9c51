package grpcapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/limitd/limitd/service"
)

// JSONHandler serves envoy ratelimit's `POST /json`: the body is a
// RateLimitRequest in proto3 JSON, the answer the RateLimitResponse in
// proto3 JSON, status 200 when the overall code is OK and 429 when it is
// OVER_LIMIT — decided exactly as ShouldRateLimit over gRPC (by
// service.RateLimit). Errors use the HTTP API's body
// ({"error":{"code","field","message"}}) and the service's one table for
// the status and Retry-After (service.AnswerOf): 400 for a bad request, 503
// with Retry-After when the cluster could not decide, and so on. Mount it on
// the HTTP API's port at /json.
func (s *Server) JSONHandler() http.Handler {
	r := &rlsServer{s: s}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeJSONError(w, http.StatusMethodNotAllowed, "method_not_allowed", "", "use POST")
			return
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, int64(s.cfg.MaxRecvMsgSize)+1))
		if err != nil {
			writeServiceError(w, service.Invalid("", "read body: "+err.Error()))
			return
		}
		if len(body) > s.cfg.MaxRecvMsgSize {
			writeServiceError(w, &service.Error{Code: service.CodePayloadTooLarge, Message: "body larger than the maximum request size"})
			return
		}
		var rr rlspb.RateLimitRequest
		if err := protojson.Unmarshal(body, &rr); err != nil {
			writeServiceError(w, service.Invalid("", "not a RateLimitRequest in proto3 JSON: "+err.Error()))
			return
		}
		ctx, cancel := context.WithTimeout(req.Context(), s.cfg.RequestTimeout)
		defer cancel()
		resp, e := s.callRLS(ctx, r, &rr)
		if e != nil {
			writeServiceError(w, e)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			writeServiceError(w, service.Internal("encode response: "+err.Error()))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
}

// callRLS decides a request as ShouldRateLimit does, with the gRPC path's
// panic recovery.
func (s *Server) callRLS(ctx context.Context, r *rlsServer, req *rlspb.RateLimitRequest) (resp *rlspb.RateLimitResponse, e *service.Error) {
	defer func() {
		if p := recover(); p != nil {
			s.cfg.Logger.Printf("json: panic: %v", p)
			resp, e = nil, service.Internal(fmt.Sprintf("internal error: %v", p))
		}
	}()
	return r.rateLimit(ctx, req)
}

// writeServiceError answers e with the status and Retry-After of the
// service's one table (service.AnswerOf). The message reads as gRPC's does
// (toStatus): the field first.
func writeServiceError(w http.ResponseWriter, e *service.Error) {
	ans := service.AnswerOf(e.Code)
	if ans.RetryAfter {
		w.Header().Set("Retry-After", service.RetryAfterValue(service.DefaultRetryAfter))
	}
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	writeJSONError(w, ans.HTTPStatus, string(e.Code), e.Field, msg)
}

func writeJSONError(w http.ResponseWriter, code int, reason, field, msg string) {
	type body struct {
		Code    string `json:"code"`
		Field   string `json:"field,omitempty"`
		Message string `json:"message"`
	}
	b, _ := json.Marshal(struct {
		Error body `json:"error"`
	}{body{reason, field, msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
