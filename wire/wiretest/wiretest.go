// Package wiretest holds limitd's canonical answers: each value of the wire
// schema beside the bytes (../testdata/answers.golden) the server must write
// for it, so that the encoder and every parser (the client's, bench's) are
// tested against the same answers.
package wiretest

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/limitd/limitd/wire"
)

// Kind says which shape an answer has, and so which parser reads it.
type Kind int

const (
	KindDecision Kind = iota // /v1/check's body, a decision object
	KindError                // any error answer's body
	KindBatch                // /v1/check/batch's body
	KindAll                  // /v1/check/all's body
)

// Answer is one canonical answer: the value and the bytes it is written as
// (without the trailing newline the server adds).
type Answer struct {
	Name     string
	Kind     Kind
	Decision wire.Decision // KindDecision
	Error    wire.Error    // KindError
	Batch    []wire.Decision
	All      wire.All
	JSON     []byte
}

// Answers are the canonical answers, in the golden file's order.
var Answers = []Answer{
	{Name: "decision allowed", Kind: KindDecision, Decision: wire.Decision{Allowed: true, Limit: 100, Remaining: 99, ResetAfterMS: 60000}},
	{Name: "decision refused", Kind: KindDecision, Decision: wire.Decision{Limit: 100, Remaining: 0, ResetAfterMS: 1500, RetryAfterMS: 1500}},
	{Name: "decision refused forever", Kind: KindDecision, Decision: wire.Decision{Limit: 5, Remaining: 0, ResetAfterMS: 0, RetryAfterMS: -1}},
	{Name: "decision delayed", Kind: KindDecision, Decision: wire.Decision{Allowed: true, Limit: 10, Remaining: 3, ResetAfterMS: 700, DelayMS: 250}},
	{Name: "decision replayed", Kind: KindDecision, Decision: wire.Decision{Allowed: true, Limit: 100, Remaining: 98, ResetAfterMS: 59000, Replayed: true}},
	{Name: "decision shadow refused", Kind: KindDecision, Decision: wire.Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfterMS: 1000, RetryAfterMS: 1000, ShadowRefused: true}},
	{Name: "decision reserved", Kind: KindDecision, Decision: wire.Decision{Allowed: true, Limit: 1000, Remaining: 990, ResetAfterMS: 60000,
		Reservation: "cAF0BnVzZXI6MQEy", ReservationExpiresMS: 60000}},
	{Name: "decision overdrawn", Kind: KindDecision, Decision: wire.Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfterMS: 6000, Debt: 5, Replayed: true}},
	{Name: "error with field", Kind: KindError, Error: wire.Error{Code: "invalid_argument", Field: "key", Message: "is required and must not be empty"}},
	{Name: "error without field", Kind: KindError, Error: wire.Error{Code: "unavailable", Message: "no leader"}},
	{Name: "error escaped", Kind: KindError, Error: wire.Error{Code: "not_found", Field: "policy", Message: "no policy \"a\\b\"\ttab\u2028"}},
	{Name: "batch", Kind: KindBatch, Batch: []wire.Decision{
		{Allowed: true, Limit: 3, Remaining: 2, ResetAfterMS: 1000},
		{Error: &wire.Error{Code: "invalid_argument", Field: "checks[1].cost", Message: "must be at least 0"}},
		{Allowed: true, Limit: 3, Remaining: 1, ResetAfterMS: 900, Replayed: true},
		{Limit: 3, Remaining: 0, ResetAfterMS: 800, RetryAfterMS: 800},
	}},
	{Name: "batch reserved", Kind: KindBatch, Batch: []wire.Decision{
		{Allowed: true, Limit: 100, Remaining: 90, ResetAfterMS: 1000, Reservation: "cAF0AWsB", ReservationExpiresMS: 60000},
		{Allowed: true, Limit: 100, Remaining: 80, ResetAfterMS: 1000, Reservation: "cAF0AWsC", ReservationExpiresMS: 59999, Replayed: true},
		{Limit: 100, Remaining: 5, ResetAfterMS: 1000, RetryAfterMS: 1000},
	}},
	{Name: "batch empty", Kind: KindBatch, Batch: []wire.Decision{}},
	{Name: "all refused", Kind: KindAll, All: wire.All{Allowed: false, Results: []wire.Decision{
		{Allowed: true, Limit: 10, Remaining: 9, ResetAfterMS: 1000},
		{Limit: 1, Remaining: 0, ResetAfterMS: 500, RetryAfterMS: 500},
	}}},
	{Name: "all replayed", Kind: KindAll, All: wire.All{Allowed: true, Replayed: true, Results: []wire.Decision{
		{Allowed: true, Limit: 10, Remaining: 8, ResetAfterMS: 900},
	}}},
}

// Encode writes a's value with the wire encoder.
func Encode(a *Answer) []byte {
	switch a.Kind {
	case KindDecision:
		return wire.AppendDecision(nil, &a.Decision)
	case KindError:
		return wire.AppendErrorBody(nil, a.Error.Code, a.Error.Field, a.Error.Message)
	case KindBatch:
		return wire.AppendBatch(nil, a.Batch)
	default:
		return wire.AppendAll(nil, &a.All)
	}
}

// GoldenPath is the golden file's path, wherever the test runs.
func GoldenPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "answers.golden")
}

// Load returns Answers with JSON read from the golden file; it fails the
// test if the file and Answers do not name the same answers in order.
func Load(t testing.TB) []Answer {
	t.Helper()
	data, err := os.ReadFile(GoldenPath())
	if err != nil {
		t.Fatal(err)
	}
	var got []Answer
	for _, line := range bytes.Split(data, []byte("\n")) {
		switch {
		case len(line) == 0 || line[0] == '#':
		case bytes.HasPrefix(line, []byte("-- ")) && bytes.HasSuffix(line, []byte(" --")):
			got = append(got, Answer{Name: string(line[3 : len(line)-3])})
		case len(got) > 0 && got[len(got)-1].JSON == nil:
			got[len(got)-1].JSON = line
		default:
			t.Fatalf("%s: unexpected line %q", GoldenPath(), line)
		}
	}
	if len(got) != len(Answers) {
		t.Fatalf("%s has %d answers, wiretest.Answers %d: regenerate with go test ./wire -update-golden", GoldenPath(), len(got), len(Answers))
	}
	out := make([]Answer, len(Answers))
	for i := range Answers {
		if got[i].Name != Answers[i].Name {
			t.Fatalf("answer %d is %q in the golden file, %q in wiretest.Answers", i, got[i].Name, Answers[i].Name)
		}
		out[i] = Answers[i]
		out[i].JSON = got[i].JSON
	}
	return out
}

// Golden renders the golden file from Answers with the encoder.
func Golden() []byte {
	var b strings.Builder
	b.WriteString("# limitd's canonical HTTP JSON answers (package wire). One answer per section:\n")
	b.WriteString("# the server writes exactly these bytes (plus a newline) and every parser reads\n")
	b.WriteString("# them back to wiretest.Answers. Regenerate: go test ./wire -update-golden\n")
	for i := range Answers {
		b.WriteString("-- " + Answers[i].Name + " --\n")
		b.Write(Encode(&Answers[i]))
		b.WriteString("\n")
	}
	return []byte(b.String())
}
