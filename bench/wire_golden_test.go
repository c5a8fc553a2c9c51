package bench

import (
	"errors"
	"testing"

	"github.com/limitd/limitd/wire/wiretest"
)

// TestReadsCanonicalAnswers fails if bench reads any of the server's
// canonical answers (wire/testdata/answers.golden) to another outcome than
// the schema's value: allowed or refused, or the entry's or body's error.
func TestReadsCanonicalAnswers(t *testing.T) {
	for _, a := range wiretest.Load(t) {
		switch a.Kind {
		case wiretest.KindDecision:
			o, err := parseDecision(a.JSON)
			if err != nil || o.Err != nil || o.Allowed != a.Decision.Allowed {
				t.Errorf("%s: read as %+v, %v", a.Name, o, err)
			}
		case wiretest.KindBatch:
			out := make([]Outcome, len(a.Batch))
			if err := parseBatch(a.JSON, out); err != nil {
				t.Fatalf("%s: %v", a.Name, err)
			}
			for i, d := range a.Batch {
				var se *StatusError
				if d.Error != nil {
					if !errors.As(out[i].Err, &se) || se.Code != d.Error.Code || se.Message != d.Error.Message {
						t.Errorf("%s[%d]: error read as %v", a.Name, i, out[i].Err)
					}
				} else if out[i].Err != nil || out[i].Allowed != d.Allowed {
					t.Errorf("%s[%d]: read as %+v", a.Name, i, out[i])
				}
			}
		case wiretest.KindError:
			if code, msg := parseError(a.JSON); code != a.Error.Code || msg != a.Error.Message {
				t.Errorf("%s: read as %q %q", a.Name, code, msg)
			}
		}
	}
}
