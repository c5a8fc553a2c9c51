package grpcapi

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc/status"

	"github.com/limitd/limitd/service"
)

// Every service code reaches gRPC clients and POST /json by the service's
// one table: the gRPC code, the HTTP status, Retry-After only where a
// retry may succeed, and the code itself as the reason.
func TestEveryCodeByTheOneTable(t *testing.T) {
	for _, c := range service.Codes() {
		want := service.AnswerOf(c)
		e := &service.Error{Code: c, Field: "f", Message: "m"}
		if got := status.Code(toStatus(e)); got != want.GRPC {
			t.Errorf("%s over gRPC: %v, want %v", c, got, want.GRPC)
		}
		rec := httptest.NewRecorder()
		writeServiceError(rec, e)
		if rec.Code != want.HTTPStatus {
			t.Errorf("%s over /json: status %d, want %d", c, rec.Code, want.HTTPStatus)
		}
		if got := rec.Header().Get("Retry-After"); (got != "") != want.RetryAfter || want.RetryAfter && got != "1" {
			t.Errorf("%s over /json: Retry-After %q, want it %v (1s)", c, got, want.RetryAfter)
		}
		var body struct {
			Error struct{ Code, Field, Message string } `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Code != string(c) || body.Error.Field != "f" || body.Error.Message != "f: m" {
			t.Errorf("%s over /json: body %s (%v)", c, rec.Body, err)
		}
	}
}
