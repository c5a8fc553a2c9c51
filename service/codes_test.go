package service

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/limitd/limitd/nodeapi"
)

// Every code the state machine and the service define has its answer on
// each transport, and the ones a client may retry say so. The expected
// values are written out: a change to the table must change this test.
func TestEveryCodeHasOneAnswer(t *testing.T) {
	want := map[Code]Answer{
		nodeapi.CodeInvalidArgument:    {http.StatusBadRequest, codes.InvalidArgument, false},
		nodeapi.CodeUnauthenticated:    {http.StatusUnauthorized, codes.Unauthenticated, false},
		nodeapi.CodeNotFound:           {http.StatusNotFound, codes.NotFound, false},
		nodeapi.CodeConflict:           {http.StatusConflict, codes.AlreadyExists, false},
		nodeapi.CodePayloadTooLarge:    {http.StatusRequestEntityTooLarge, codes.ResourceExhausted, false},
		nodeapi.CodeUnavailable:        {http.StatusServiceUnavailable, codes.Unavailable, true},
		nodeapi.CodeOutcomeUnknown:     {http.StatusServiceUnavailable, codes.Aborted, true},
		nodeapi.CodeInternal:           {http.StatusInternalServerError, codes.Internal, false},
		nodeapi.CodeKeyBudgetExhausted: {http.StatusTooManyRequests, codes.ResourceExhausted, true},
		nodeapi.CodeCrossSlot:          {http.StatusConflict, codes.FailedPrecondition, false},
		nodeapi.CodeWrongGroup:         {http.StatusMisdirectedRequest, codes.FailedPrecondition, false},
		nodeapi.CodeSlotMoving:         {http.StatusServiceUnavailable, codes.Unavailable, true},
	}
	if len(Codes()) != len(want) || len(answers) != len(want) {
		t.Fatalf("Codes() lists %d, the table has %d, want %d", len(Codes()), len(answers), len(want))
	}
	for _, c := range Codes() {
		w, ok := want[c]
		if !ok {
			t.Errorf("code %q has no expected answer here", c)
			continue
		}
		if got := AnswerOf(c); got != w {
			t.Errorf("AnswerOf(%q) = %+v, want %+v", c, got, w)
		}
	}
	if got := AnswerOf("no_such_code"); got != want[nodeapi.CodeInternal] {
		t.Errorf("an unknown code answers %+v, want internal's", got)
	}
}

// Codes lists every Code constant the contract defines (read from nodeapi's
// source, and fsm's in case one is added there, so a code added without an
// answer here fails).
func TestCodesListsEveryContractCode(t *testing.T) {
	files, err := filepath.Glob("../nodeapi/*.go")
	more, err2 := filepath.Glob("../fsm/*.go")
	if err != nil || err2 != nil || len(files) == 0 || len(more) == 0 {
		t.Fatalf("nodeapi and fsm sources: %v %v %v %v", files, more, err, err2)
	}
	files = append(files, more...)
	defined := map[Code]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				return true
			}
			for _, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, _ := strconv.Unquote(lit.Value)
					defined[Code(s)] = true
				}
			}
			return true
		})
	}
	listed := map[Code]bool{}
	for _, c := range Codes() {
		listed[c] = true
	}
	for c := range defined {
		if !listed[c] {
			t.Errorf("the contract defines code %q, which Codes() and the answer table lack", c)
		}
	}
	if len(defined) != len(listed) {
		t.Errorf("the contract defines %d codes, Codes() lists %d", len(defined), len(listed))
	}
}

func TestRetryAfterValue(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second: "1", 1500 * time.Millisecond: "2", 3 * time.Second: "3", time.Millisecond: "1",
	} {
		if got := RetryAfterValue(d); got != want {
			t.Errorf("RetryAfterValue(%v) = %q, want %q", d, got, want)
		}
	}
}
