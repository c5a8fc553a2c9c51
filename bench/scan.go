package bench

import (
	"sync"

	"github.com/limitd/limitd/wire"
)

// limitd's answers are read with package wire's parser, the client's own:
// it reads the server's fixed shapes without reflection, so that the load
// generator spends its share of the machine's CPU on sending load, and
// leaves anything else to encoding/json.

func outcomeOf(d *wire.Decision) Outcome {
	if d.Error != nil {
		return Outcome{Err: &StatusError{Code: d.Error.Code, Message: d.Error.Message}}
	}
	return Outcome{Allowed: d.Allowed}
}

// parseDecision reads a /v1/check 200 response.
func parseDecision(b []byte) (Outcome, error) {
	d, err := wire.ParseDecision(b)
	if err != nil {
		return Outcome{}, malformed("%v", err)
	}
	return outcomeOf(&d), nil
}

var decisionsPool = sync.Pool{New: func() any { s := make([]wire.Decision, 0, 64); return &s }}

// parseBatch reads a /v1/check/batch 200 response into out, which must match
// the number of results exactly.
func parseBatch(b []byte, out []Outcome) error {
	p := decisionsPool.Get().(*[]wire.Decision)
	defer decisionsPool.Put(p)
	ds, err := wire.ParseBatch(b, *p)
	*p = ds[:0]
	if err != nil {
		return malformed("%v", err)
	}
	if len(ds) != len(out) {
		return malformed("%d results for %d checks", len(ds), len(out))
	}
	for i := range ds {
		out[i] = outcomeOf(&ds[i])
	}
	return nil
}

// parseError extracts code and message from an error response body
// {"error":{"code":...,"message":...}}; both are empty if it is not one.
func parseError(b []byte) (code, message string) {
	e, _ := wire.ParseError(b)
	return e.Code, e.Message
}
