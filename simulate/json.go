package simulate

import (
	"encoding/json"

	"github.com/limitd/limitd/algo"
)

// JSONDecision is one decision in JSON, as `limitd simulate --format jsonl`
// prints it and POST /v1/simulate returns it. Times are exact decimals: t in
// seconds, the others in milliseconds with retry_after_ms -1 for never.
type JSONDecision struct {
	Algorithm    string      `json:"algorithm,omitempty"`
	T            json.Number `json:"t"`
	Key          string      `json:"key"`
	Cost         int64       `json:"cost"`
	Allowed      bool        `json:"allowed"`
	Remaining    int64       `json:"remaining"`
	RetryAfterMs json.Number `json:"retry_after_ms"`
	ResetAfterMs json.Number `json:"reset_after_ms"`
	DelayMs      json.Number `json:"delay_ms"`
}

// NewJSONDecision is d, the decision on r, in JSON form; algorithm may be
// empty (it is then omitted).
func NewJSONDecision(algorithm string, r Request, d algo.Decision) JSONDecision {
	return JSONDecision{
		Algorithm:    algorithm,
		T:            json.Number(FormatSeconds(r.Time)),
		Key:          r.Key,
		Cost:         r.Cost,
		Allowed:      d.Allowed,
		Remaining:    d.Remaining,
		RetryAfterMs: json.Number(FormatMillis(d.RetryAfter)),
		ResetAfterMs: json.Number(FormatMillis(d.ResetAfter)),
		DelayMs:      json.Number(FormatMillis(d.Delay)),
	}
}
