package client

import (
	"net/http"
	"testing"
	"time"

	"github.com/limitd/limitd/wire"
	"github.com/limitd/limitd/wire/wiretest"
)

// TestReadsCanonicalAnswers fails if the client reads any of the server's
// canonical answers (wire/testdata/answers.golden) to other values than
// the schema's: decisions through the check path's parser, error bodies
// through the one every call uses.
func TestReadsCanonicalAnswers(t *testing.T) {
	want := func(w *wire.Decision) Decision {
		d := Decision{Allowed: w.Allowed, Limit: w.Limit, Remaining: w.Remaining,
			ResetAfter: time.Duration(w.ResetAfterMS) * time.Millisecond, RetryAfter: time.Duration(w.RetryAfterMS) * time.Millisecond,
			Delay: time.Duration(w.DelayMS) * time.Millisecond, ShadowRefused: w.ShadowRefused, Replayed: w.Replayed}
		if w.RetryAfterMS < 0 {
			d.RetryAfter = Never
		}
		return d
	}
	for _, a := range wiretest.Load(t) {
		switch a.Kind {
		case wiretest.KindDecision:
			w, err := parseDecision(a.JSON)
			if got := decisionOf(&w); err != nil || got != want(&a.Decision) {
				t.Errorf("%s: read as %+v, %v; want %+v", a.Name, got, err, want(&a.Decision))
			}
		case wiretest.KindBatch:
			ws, err := parseBatch(a.JSON, nil)
			if err != nil || len(ws) != len(a.Batch) {
				t.Fatalf("%s: %d results, %v", a.Name, len(ws), err)
			}
			for i := range ws {
				if e := a.Batch[i].Error; e != nil {
					if ws[i].Error == nil || *errOf(ws[i].Error, 400) != (Error{Status: 400, Code: e.Code, Field: e.Field, Message: e.Message}) {
						t.Errorf("%s[%d]: error read as %+v", a.Name, i, ws[i].Error)
					}
				} else if got := decisionOf(&ws[i]); got != want(&a.Batch[i]) {
					t.Errorf("%s[%d]: read as %+v", a.Name, i, got)
				}
			}
		case wiretest.KindError:
			err := decodeError(&http.Response{StatusCode: http.StatusBadRequest, Header: http.Header{}}, a.JSON)
			e, ok := err.(*Error)
			if !ok || e.Code != a.Error.Code || e.Field != a.Error.Field || e.Message != a.Error.Message {
				t.Errorf("%s: read as %#v", a.Name, err)
			}
		}
	}
}
