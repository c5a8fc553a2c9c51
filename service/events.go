package service

import (
	"bytes"
	"math"
	"strconv"

	"github.com/limitd/limitd/nodeapi"
)

// Alerts: a limit's "notify" thresholds. Crossing one in a window puts one
// event in the cluster's outbox; the leader delivers it to every webhook
// (webhooks.go) and every node streams the events it applies (GET
// /v1/events). The decision is the state machine's (fsm/notify.go); this
// file validates what a client gives.

// ValidateNotify turns "notify" (fractions of the limit, nil: none) into
// the state machine's thresholds: at most nodeapi.MaxNotify, each in
// (0, 1] with at most four decimals, strictly increasing. Errors name
// "notify" or "notify[i]" under prefix.
func ValidateNotify(n []float64, prefix string) ([nodeapi.MaxNotify]uint16, *Error) {
	var out [nodeapi.MaxNotify]uint16
	if n == nil {
		return out, nil
	}
	if len(n) == 0 || len(n) > nodeapi.MaxNotify {
		return out, Invalid(joinPrefix(prefix, "notify"), "1 to "+strconv.Itoa(nodeapi.MaxNotify)+" thresholds")
	}
	prev := uint16(0)
	for i, f := range n {
		field := joinPrefix(prefix, "notify["+strconv.Itoa(i)+"]")
		if !(f > 0 && f <= 1) {
			return [nodeapi.MaxNotify]uint16{}, Invalid(field, "a threshold is a fraction of the limit in (0, 1]")
		}
		p := math.Round(f * nodeapi.NotifyScale)
		if math.Abs(p-f*nodeapi.NotifyScale) > 1e-6 || p == 0 {
			return [nodeapi.MaxNotify]uint16{}, Invalid(field, "at most four decimals")
		}
		if uint16(p) <= prev {
			return [nodeapi.MaxNotify]uint16{}, Invalid(field, "thresholds must be strictly increasing")
		}
		out[i], prev = uint16(p), uint16(p)
	}
	return out, nil
}

// NotifyOut is thresholds in the API's form (nil: none).
func NotifyOut(n [nodeapi.MaxNotify]uint16) []float64 {
	var out []float64
	for _, t := range n {
		if t != 0 {
			out = append(out, float64(t)/nodeapi.NotifyScale)
		}
	}
	return out
}

// EventType is an event body's "type" (threshold or ban; "event" for any
// other), as GET /v1/events names it and gRPC WatchEvents carries it: one
// reading for every front end.
func EventType(body []byte) string {
	for _, t := range []string{"threshold", "ban"} {
		if bytes.Contains(body, []byte(`"type":"`+t+`"`)) {
			return t
		}
	}
	return "event"
}
