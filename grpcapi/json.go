package grpcapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// httpStatusOf maps the gRPC codes ShouldRateLimit answers with to HTTP.
var httpStatusOf = map[codes.Code]int{
	codes.InvalidArgument:  http.StatusBadRequest,
	codes.Unavailable:      http.StatusServiceUnavailable,
	codes.Aborted:          http.StatusServiceUnavailable,
	codes.DeadlineExceeded: http.StatusServiceUnavailable,
	codes.Canceled:         http.StatusServiceUnavailable,
}

// JSONHandler serves envoy ratelimit's `POST /json`: the body is a
// RateLimitRequest in proto3 JSON, the answer the RateLimitResponse in
// proto3 JSON, status 200 when the overall code is OK and 429 when it is
// OVER_LIMIT — decided exactly as ShouldRateLimit over gRPC. Errors use the
// HTTP API's body ({"error":{"code","field","message"}}): 400 for a bad
// request, 503 (with Retry-After) when the cluster could not decide, 500
// otherwise. Mount it on the HTTP API's port at /json.
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
			writeJSONError(w, http.StatusBadRequest, "invalid_argument", "", "read body: "+err.Error())
			return
		}
		if len(body) > s.cfg.MaxRecvMsgSize {
			writeJSONError(w, http.StatusRequestEntityTooLarge, "payload_too_large", "", "body larger than the maximum request size")
			return
		}
		var rr rlspb.RateLimitRequest
		if err := protojson.Unmarshal(body, &rr); err != nil {
			writeJSONError(w, http.StatusBadRequest, "invalid_argument", "", "not a RateLimitRequest in proto3 JSON: "+err.Error())
			return
		}
		ctx, cancel := context.WithTimeout(req.Context(), s.cfg.RequestTimeout)
		defer cancel()
		resp, err := s.callRLS(ctx, r, &rr)
		if err != nil {
			st := status.Convert(err)
			code, ok := httpStatusOf[st.Code()]
			if !ok {
				code = http.StatusInternalServerError
			}
			reason, field := "internal", ""
			for _, d := range st.Details() {
				switch d := d.(type) {
				case *errdetails.ErrorInfo:
					reason = d.GetReason()
				case *errdetails.BadRequest:
					field = d.GetFieldViolations()[0].GetField()
				}
			}
			if code == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", "1")
			}
			writeJSONError(w, code, reason, field, st.Message())
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			writeJSONError(w, http.StatusInternalServerError, "internal", "", "encode response: "+err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
}

// callRLS runs ShouldRateLimit with the gRPC path's panic recovery.
func (s *Server) callRLS(ctx context.Context, r *rlsServer, req *rlspb.RateLimitRequest) (resp *rlspb.RateLimitResponse, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.cfg.Logger.Printf("json: panic: %v", p)
			resp, err = nil, status.Errorf(codes.Internal, "internal error: %v", p)
		}
	}()
	return r.ShouldRateLimit(ctx, req)
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
