package api

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limitd/limitd/service"
)

// Every service code is answered by the service's one table: its HTTP
// status, and Retry-After (the configured wait) only where a retry may
// succeed.
func TestEveryCodeByTheOneTable(t *testing.T) {
	s := &Server{cfg: Config{NoLeaderRetryAfter: 2500 * time.Millisecond}.withDefaults()}
	for _, c := range service.Codes() {
		want := service.AnswerOf(c)
		rec := httptest.NewRecorder()
		writeError(rec, s.httpError(&service.Error{Code: c, Field: "f", Message: "m"}))
		if rec.Code != want.HTTPStatus {
			t.Errorf("%s: status %d, want %d", c, rec.Code, want.HTTPStatus)
		}
		if got := rec.Header().Get("Retry-After"); (got != "") != want.RetryAfter || want.RetryAfter && got != "3" {
			t.Errorf("%s: Retry-After %q, want it %v (3, the configured 2.5s rounded up)", c, got, want.RetryAfter)
		}
	}
}
