// Package rlstest holds the conformance scenarios for envoy ratelimit
// configurations (rls/testdata/readme: every worked example of envoy
// ratelimit's README and limitd's extensions) and runs them against any
// front end: the in-memory executor of package rls's tests, the gRPC RLS
// server over loopback. One set of expectations, so every transport gives
// the same answers.
package rlstest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/limitd/limitd/rls"
)

// Scenario is a configuration and a sequence of requests with the answers
// expected, all within one window of Unit.
type Scenario struct {
	Name   string `json:"name"`
	Config string `json:"config"` // file in Dir()
	Domain string `json:"domain"` // request domain; default the config's
	Unit   string `json:"unit"`   // shortest window the steps must fit in
	Steps  []Step `json:"steps"`
}

// Step is one request and its expected answer.
type Step struct {
	Descriptors []Descriptor `json:"descriptors"`
	HitsAddend  uint32       `json:"hits_addend"`
	Overall     string       `json:"overall"` // OK or OVER_LIMIT
	Statuses    []Status     `json:"statuses"`
}

// Descriptor is a request descriptor.
type Descriptor struct {
	Entries    [][2]string `json:"entries"`
	HitsAddend *uint64     `json:"hits_addend"`
	Limit      *struct {
		RequestsPerUnit uint32 `json:"requests_per_unit"`
		Unit            string `json:"unit"`
	} `json:"limit"`
}

// Status is an expected descriptor status; Limit nil means no current limit.
type Status struct {
	Code      string  `json:"code"`
	Limit     *uint32 `json:"limit"`
	Remaining *uint32 `json:"remaining"`
	Name      string  `json:"name"`
}

// Answer is what a front end answered, in the same terms.
type Answer struct {
	Overall  string
	Statuses []AnswerStatus
}

// AnswerStatus is one descriptor's answer.
type AnswerStatus struct {
	Code       string
	HasLimit   bool
	Limit      uint32
	Name       string
	Remaining  uint32
	UntilReset time.Duration
}

// Dir is rls/testdata/readme.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "readme")
}

// Load reads the scenarios.
func Load(t testing.TB) []Scenario {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Dir(), "scenarios.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ss []Scenario
	if err := json.Unmarshal(b, &ss); err != nil {
		t.Fatal(err)
	}
	return ss
}

// Raw is a scenario's configuration file as written.
func (s *Scenario) Raw(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Dir(), s.Config))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Parse parses a scenario's configuration.
func (s *Scenario) Parse(t testing.TB) *rls.Domain {
	t.Helper()
	d, err := rls.Parse(s.Config, s.Raw(t))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Request is a step's request.
func (s *Scenario) Request(d *rls.Domain, st *Step) rls.Request {
	req := rls.Request{Domain: s.Domain, HitsAddend: st.HitsAddend}
	if req.Domain == "" {
		req.Domain = d.Name()
	}
	for _, sd := range st.Descriptors {
		rd := rls.RequestDescriptor{HitsAddend: sd.HitsAddend}
		for _, e := range sd.Entries {
			rd.Entries = append(rd.Entries, rls.Entry{Key: e[0], Value: e[1]})
		}
		if sd.Limit != nil {
			u, ok := rls.ParseUnit(sd.Limit.Unit)
			if !ok {
				panic("rlstest: bad unit " + sd.Limit.Unit)
			}
			rd.Limit = &rls.Override{RequestsPerUnit: sd.Limit.RequestsPerUnit, Unit: u}
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	return req
}

// Check compares an answer with a step's expectations; "" when they agree.
func (st *Step) Check(a Answer) string {
	if a.Overall != st.Overall {
		return fmt.Sprintf("overall %s, want %s (%+v)", a.Overall, st.Overall, a.Statuses)
	}
	if len(a.Statuses) != len(st.Statuses) {
		return fmt.Sprintf("%d statuses, want %d", len(a.Statuses), len(st.Statuses))
	}
	for i, w := range st.Statuses {
		g := a.Statuses[i]
		switch {
		case g.Code != w.Code:
			return fmt.Sprintf("status %d: code %s, want %s", i, g.Code, w.Code)
		case w.Limit == nil && g.HasLimit:
			return fmt.Sprintf("status %d: current limit %d, want none", i, g.Limit)
		case w.Limit != nil && (!g.HasLimit || g.Limit != *w.Limit):
			return fmt.Sprintf("status %d: current limit %d (set %v), want %d", i, g.Limit, g.HasLimit, *w.Limit)
		case w.Remaining != nil && g.Remaining != *w.Remaining:
			return fmt.Sprintf("status %d: remaining %d, want %d", i, g.Remaining, *w.Remaining)
		case w.Name != "" && g.Name != w.Name:
			return fmt.Sprintf("status %d: limit name %q, want %q", i, g.Name, w.Name)
		case g.HasLimit && (g.UntilReset <= 0 || g.UntilReset > 400*24*time.Hour):
			return fmt.Sprintf("status %d: duration until reset %v", i, g.UntilReset)
		}
	}
	return ""
}

// alignToWindow waits for the next window of w ns when less than half of
// the current one (at most 5 s) is left, so a scenario's steps usually fit
// in one window. This follows the wall clock the cluster stamps decisions
// with; it synchronises nothing.
func alignToWindow(w int64) {
	need := min(w/2, int64(5*time.Second))
	now := time.Now().UnixNano()
	if left := w - now%w; left < need {
		time.Sleep(time.Duration(left))
	}
}

// Run runs every scenario as a subtest. setup prepares an executor for a
// scenario's domain (loading its configuration, s.Raw, into the front end);
// exec sends one request. A scenario whose steps straddle a window boundary of its unit
// (checked on the wall clock; the steps' counts would reset part way) is
// run again, up to three times, in the new window.
func Run(t *testing.T, setup func(t *testing.T, s *Scenario, d *rls.Domain) (exec func(rls.Request) (Answer, error))) {
	for _, s := range Load(t) {
		t.Run(s.Name, func(t *testing.T) {
			d := s.Parse(t)
			u, ok := rls.ParseUnit(s.Unit)
			if !ok {
				t.Fatalf("scenario unit %q", s.Unit)
			}
			w := int64(u.Duration())
			for attempt := 0; ; attempt++ {
				exec := setup(t, &s, d)
				alignToWindow(w)
				start := time.Now().UnixNano() / w
				failure := ""
				for i := range s.Steps {
					st := &s.Steps[i]
					a, err := exec(s.Request(d, st))
					if err != nil {
						failure = fmt.Sprintf("step %d: %v", i, err)
						break
					}
					if msg := st.Check(a); msg != "" {
						failure = fmt.Sprintf("step %d: %s", i, msg)
						break
					}
				}
				if time.Now().UnixNano()/w != start && attempt < 2 {
					continue // a window ended during the steps
				}
				if failure != "" {
					t.Fatal(failure)
				}
				return
			}
		})
	}
}
