package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/simulate"
)

// MaxSimulateRequests bounds the requests in one POST /v1/simulate trace.
// With at most one run per algorithm, a call decides at most five times as
// many; every algorithm's work is linear in the trace. A call at the bound
// (five algorithms) costs about 50 ms of CPU, mostly encoding its 6 MB answer.
const MaxSimulateRequests = 10_000

// simulateSlots runs one simulation at a time in the process: the endpoint
// needs no token, and a flood of calls must not take more than one core from
// the checks. Others wait their turn, as long as their request lasts.
var simulateSlots = make(chan struct{}, 1)

// simulateJSON is the body of POST /v1/simulate: a trace in the format of
// `limitd simulate`, the limit's options, and the algorithms to run (all
// five when absent). As with --compare, burst applies to the buckets only and
// count_refused to sliding_log only.
type simulateJSON struct {
	Trace        string   `json:"trace"`
	Algorithms   []string `json:"algorithms"`
	Limit        int64    `json:"limit"`
	Window       string   `json:"window"`
	Burst        int64    `json:"burst"`
	CountRefused bool     `json:"count_refused"`
	Calendar     string   `json:"calendar"`
	Timezone     string   `json:"timezone"`
}

// simulateRunJSON is one algorithm's replay of the trace.
type simulateRunJSON struct {
	Algorithm string                  `json:"algorithm"`
	Spec      string                  `json:"spec"` // the limit as `limitd simulate` flags
	Admitted  int                     `json:"admitted"`
	Refused   int                     `json:"refused"`
	Decisions []simulate.JSONDecision `json:"decisions"` // one per request, in trace order
	Keys      []simulate.KeyCounts    `json:"keys"`      // per key, in order of first appearance
}

type simulateResponse struct {
	Requests int               `json:"requests"`
	Runs     []simulateRunJSON `json:"runs"`
}

// handleSimulate serves POST /v1/simulate: the engine of `limitd simulate
// --compare` on a trace in the body. It reads nothing from the cluster and
// writes nothing, so it needs no admin token; its work is bounded by
// MaxSimulateRequests and one simulation runs at a time.
func (s *Server) handleSimulate(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	body, e := s.readBody(w, req, nil)
	if e != nil {
		writeError(w, e)
		return
	}
	var in simulateJSON
	if e := decodeStrict(body, &in, ""); e != nil {
		writeError(w, e)
		return
	}
	select {
	case simulateSlots <- struct{}{}:
		defer func() { <-simulateSlots }()
	case <-req.Context().Done():
		writeError(w, &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable,
			message: "the request ended while waiting for other simulations to finish", retryAfter: s.cfg.NoLeaderRetryAfter})
		return
	}
	resp, e := runSimulation(&in)
	if e != nil {
		writeError(w, e)
		return
	}
	writeValue(w, http.StatusOK, resp)
}

// runSimulation validates in and replays its trace under each algorithm.
// Errors name the field: trace (with the line), algorithms[i], or the
// limit's own field.
func runSimulation(in *simulateJSON) (*simulateResponse, *apiError) {
	algs := algo.Algorithms
	if in.Algorithms != nil {
		if len(in.Algorithms) == 0 {
			return nil, invalid("algorithms", "empty: name at least one algorithm, or omit the field for all five")
		}
		algs = nil
		seen := map[algo.Algorithm]bool{}
		for i, name := range in.Algorithms {
			field := fmt.Sprintf("algorithms[%d]", i)
			a, err := algo.ParseAlgorithm(name)
			if err != nil {
				return nil, invalid(field, algoMessage(err))
			}
			if seen[a] {
				return nil, invalid(field, fmt.Sprintf("%s is listed twice", a))
			}
			seen[a] = true
			algs = append(algs, a)
		}
	}
	cfg := algo.Config{Limit: in.Limit, Window: in.Window, Burst: in.Burst,
		CountRefused: in.CountRefused, Calendar: in.Calendar, Timezone: in.Timezone}
	specs, err := simulate.Specs(cfg, algs)
	if err != nil {
		var fe *algo.FieldError
		if errors.As(err, &fe) {
			return nil, invalid(fe.Field, fe.Message)
		}
		return nil, invalid("", err.Error())
	}
	trace, err := simulate.ParseTrace(strings.NewReader(in.Trace), MaxSimulateRequests)
	var le *simulate.LineError
	var tl *simulate.TooLongError
	switch {
	case errors.As(err, &le):
		return nil, invalid("trace", le.Error())
	case errors.As(err, &tl):
		return nil, invalid("trace", fmt.Sprintf("more than %d requests (the playground's bound); run `limitd simulate` for longer traces", tl.Max))
	case err != nil:
		return nil, invalid("trace", err.Error())
	case len(trace) == 0:
		return nil, invalid("trace", `no requests: want one per line, "<seconds> <key> [<cost>]"`)
	}
	resp := &simulateResponse{Requests: len(trace), Runs: make([]simulateRunJSON, len(specs))}
	for i, spec := range specs {
		run, err := simulate.Replay(spec, trace)
		if err != nil {
			return nil, internalError("simulate: %v", err)
		}
		out := &resp.Runs[i]
		out.Algorithm = spec.Algorithm.String()
		out.Spec = simulate.Describe(spec)
		out.Decisions = make([]simulate.JSONDecision, len(trace))
		for j, r := range trace {
			out.Decisions[j] = simulate.NewJSONDecision("", r, run.Decisions[j])
		}
		out.Keys = run.Summary(trace)
		for _, k := range out.Keys {
			out.Admitted += k.Admitted
			out.Refused += k.Refused
		}
	}
	return resp, nil
}

// algoMessage is an algo error's message without its field name.
func algoMessage(err error) string {
	var fe *algo.FieldError
	if errors.As(err, &fe) {
		return fe.Message
	}
	return err.Error()
}
