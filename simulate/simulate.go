// Package simulate owns replaying a trace of requests against the limiter
// algorithms of package algo: reading the trace format, deciding every
// request with a state per key, summarising the result per key and the JSON
// form of each decision. `limitd simulate` and the status page's playground
// (POST /v1/simulate) both use it, so that they answer alike; neither stores
// anything nor needs a cluster.
package simulate

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/limitd/limitd/algo"
)

// Request is one line of a trace: a request of Cost at Time (nanoseconds
// since the epoch) for Key. Cost 0 is a peek.
type Request struct {
	Time int64
	Key  string
	Cost int64
}

// LineError is a malformed trace line.
type LineError struct {
	Line int    // 1-based
	Msg  string // what is wrong with it
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// TooLongError reports a trace with more requests than the caller allows.
type TooLongError struct{ Max int }

func (e *TooLongError) Error() string {
	return fmt.Sprintf("more than %d requests: split the trace", e.Max)
}

// MaxLineBytes bounds one trace line.
const MaxLineBytes = 1 << 20

// ParseTrace reads a whole trace, so that a malformed line is reported (as a
// *LineError) before anything is decided. Each line is
// "<seconds> <key> [<cost>]", in time order; blank lines and anything after
// '#' are ignored. maxRequests > 0 bounds the requests (a *TooLongError
// beyond); 0 means no bound, for the command line. Other errors are the
// reader's.
func ParseTrace(r io.Reader, maxRequests int) ([]Request, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), MaxLineBytes)
	var trace []Request
	prevLine := 0
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		bad := func(format string, a ...any) ([]Request, error) {
			return nil, &LineError{Line: n, Msg: fmt.Sprintf(format, a...)}
		}
		if len(fields) > 3 {
			return bad("%d fields, want <seconds> <key> [<cost>]", len(fields))
		}
		if len(fields) < 2 {
			return bad("missing key, want <seconds> <key> [<cost>]")
		}
		t, err := ParseSeconds(fields[0])
		if err != nil {
			return bad("%v", err)
		}
		req := Request{Time: t, Key: fields[1], Cost: 1}
		if len(fields) == 3 {
			if req.Cost, err = strconv.ParseInt(fields[2], 10, 64); err != nil || req.Cost < 0 {
				return bad("invalid cost %q: want a whole number ≥ 0", fields[2])
			}
		}
		if len(trace) > 0 && t < trace[len(trace)-1].Time {
			return bad("time %s is before line %d's %s: the trace must be in time order",
				fields[0], prevLine, FormatSeconds(trace[len(trace)-1].Time))
		}
		if maxRequests > 0 && len(trace) == maxRequests {
			return nil, &TooLongError{Max: maxRequests}
		}
		trace = append(trace, req)
		prevLine = n
	}
	return trace, sc.Err()
}

// ParseSeconds reads a decimal number of seconds exactly: whole seconds and
// up to nine decimal places, at most algo.MaxTime.
func ParseSeconds(s string) (int64, error) {
	whole, frac, dot := strings.Cut(s, ".")
	digits := func(d string) bool { return d != "" && strings.Trim(d, "0123456789") == "" }
	if !digits(whole) || dot && !digits(frac) {
		return 0, fmt.Errorf("invalid time %q: want seconds since the epoch such as 35 or 35.25", s)
	}
	if len(frac) > 9 {
		return 0, fmt.Errorf("invalid time %q: more than 9 decimal places (nanoseconds)", s)
	}
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || sec > algo.MaxTime/int64(time.Second) {
		return 0, fmt.Errorf("time %q is too late: at most %d seconds", s, algo.MaxTime/int64(time.Second))
	}
	ns := int64(0)
	if frac != "" {
		ns, _ = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	return sec*int64(time.Second) + ns, nil
}

// FormatSeconds prints ns as exact decimal seconds: "59", "35.25".
func FormatSeconds(ns int64) string {
	s := strconv.FormatInt(ns/int64(time.Second), 10)
	if frac := ns % int64(time.Second); frac != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%09d", frac), "0")
	}
	return s
}

// FormatMillis prints d as exact decimal milliseconds; negative (algo.Never)
// is -1.
func FormatMillis(d time.Duration) string {
	if d < 0 {
		return "-1"
	}
	s := strconv.FormatInt(int64(d/time.Millisecond), 10)
	if frac := d % time.Millisecond; frac != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%06d", frac), "0")
	}
	return s
}

// Run is one spec's decisions over a whole trace, one per request.
type Run struct {
	Spec      algo.Spec
	Decisions []algo.Decision
}

// Replay decides every request of the trace under s, one state per key,
// starting from no state. Each state is Replay's own, so it is updated in
// place: a long sliding_log is not copied at every request. Work and memory
// are linear in the trace (a state holds at most one entry per request).
func Replay(s algo.Spec, trace []Request) (Run, error) {
	run := Run{Spec: s, Decisions: make([]algo.Decision, len(trace))}
	states := map[string][]byte{}
	for i, r := range trace {
		var d algo.Decision
		var next []byte
		var err error
		if s.Algorithm == algo.Concurrency {
			// A trace has no releases: every admitted request holds its
			// slot (named by its position) for the whole hold.
			d, _, next, err = algo.Acquire(nil, &s, states[r.Key], r.Time, r.Cost, strconv.AppendInt(nil, int64(i), 10))
		} else {
			d, next, err = algo.DecideInPlace(&s, states[r.Key], r.Time, r.Cost)
		}
		if err != nil {
			return Run{}, fmt.Errorf("%v at %s, key %q: %w", s.Algorithm, FormatSeconds(r.Time), r.Key, err)
		}
		if next == nil {
			delete(states, r.Key)
		} else {
			states[r.Key] = next
		}
		run.Decisions[i] = d
	}
	return run, nil
}

// Specs expands one configuration into a spec per algorithm, as
// `limitd simulate --compare` does: the burst applies only to the buckets and
// count_refused only to sliding_log, so that one set of options can be
// compared across all of them. Errors are *algo.FieldError naming the
// configuration's JSON field.
func Specs(cfg algo.Config, algorithms []algo.Algorithm) ([]algo.Spec, error) {
	specs := make([]algo.Spec, 0, len(algorithms))
	for _, a := range algorithms {
		c := cfg
		c.Algorithm = a.String()
		if !a.HasBurst() {
			c.Burst = 0
		}
		if !a.HasCountRefused() {
			c.CountRefused = false
		}
		s, err := c.Spec()
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	return specs, nil
}

// KeyCounts is one key's admitted and refused requests in a run. Peeks
// (cost 0) count as neither.
type KeyCounts struct {
	Key      string `json:"key"`
	Admitted int    `json:"admitted"`
	Refused  int    `json:"refused"`
}

// Summary is the run's counts per key, keys in order of first appearance.
func (run Run) Summary(trace []Request) []KeyCounts {
	index := map[string]int{}
	var out []KeyCounts
	for i, r := range trace {
		k, ok := index[r.Key]
		if !ok {
			k = len(out)
			index[r.Key] = k
			out = append(out, KeyCounts{Key: r.Key})
		}
		switch {
		case r.Cost == 0: // a peek admits nothing
		case run.Decisions[i].Allowed:
			out[k].Admitted++
		default:
			out[k].Refused++
		}
	}
	return out
}

// Describe is the spec in the command's flag form, such as
// "token_bucket --limit 10 --window 1m --burst 5".
func Describe(s algo.Spec) string {
	c := s.Config()
	out := fmt.Sprintf("%s --limit %d", c.Algorithm, c.Limit)
	if c.Hold != "" {
		out += " --hold " + c.Hold + " --max-hold " + c.MaxHold
	} else if c.Calendar != "" {
		out += " --calendar " + c.Calendar
		if c.Timezone != "" {
			out += " --timezone " + c.Timezone
		}
	} else {
		out += " --window " + c.Window
	}
	if c.Burst != 0 {
		out += fmt.Sprintf(" --burst %d", c.Burst)
	}
	if c.CountRefused {
		out += " --count-refused"
	}
	return out
}
