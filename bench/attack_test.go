package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestAttackGenMix(t *testing.T) {
	normal, err := NewKeyGen(DistUniform, 1000, DefaultZipfS, 7, 3)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewAttackGen(normal, 10, 0.9, 7, 3)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200_000
	hot := map[int]int{}
	var normals int
	for range n {
		k := g.Next()
		switch {
		case IsHot(k):
			h := HotNumber(k)
			if h < 0 || h >= 10 || HotIndex(h) != k {
				t.Fatalf("hot key index %d → number %d", k, h)
			}
			hot[h]++
		case k >= 1000:
			t.Fatalf("normal key %d out of range", k)
		default:
			normals++
		}
	}
	if f := float64(n-normals) / n; math.Abs(f-0.9) > 0.01 {
		t.Errorf("hot fraction %.3f, want 0.9", f)
	}
	if len(hot) != 10 {
		t.Errorf("%d hot keys used, want 10", len(hot))
	}
	for h, c := range hot {
		if want := 0.9 * n / 10; math.Abs(float64(c)-want) > 0.05*want {
			t.Errorf("hot key %d: %d checks, want about %.0f (uniform over the hot keys)", h, c, want)
		}
	}
}

// The normal keys follow the same sequence with and without the attack, so
// the two runs load the normal keys alike.
func TestAttackGenKeepsNormalSequence(t *testing.T) {
	plain, _ := NewKeyGen(DistZipf, 500, DefaultZipfS, 9, 1)
	inner, _ := NewKeyGen(DistZipf, 500, DefaultZipfS, 9, 1)
	g, err := NewAttackGen(inner, 3, 0.5, 9, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; {
		k := g.Next()
		if IsHot(k) {
			continue
		}
		if want := plain.Next(); k != want {
			t.Fatalf("normal key %d is %d, want %d", i, k, want)
		}
		i++
	}
}

func TestAttackGenErrorsAndNoAttack(t *testing.T) {
	normal, _ := NewKeyGen(DistUniform, 10, DefaultZipfS, 1, 0)
	for _, tc := range []struct {
		hot  int
		frac float64
	}{{-1, 0.5}, {3, -0.1}, {3, 1.5}, {3, math.NaN()}, {3, 0}, {0, 0.5}} {
		if _, err := NewAttackGen(normal, tc.hot, tc.frac, 1, 0); err == nil {
			t.Errorf("hot %d fraction %g: no error", tc.hot, tc.frac)
		}
	}
	if g, err := NewAttackGen(normal, 0, 0, 1, 0); err != nil || g != normal {
		t.Errorf("no attack: %v %v, want the normal generator itself", g, err)
	}
	// Sequential keys under attack still stride by the workers.
	seq, _ := NewKeyGen(DistSequential, 100, DefaultZipfS, 1, 2)
	a, _ := NewAttackGen(seq, 1, 0.01, 1, 2)
	Stride(a, 4)
	var got []int
	for len(got) < 3 {
		if k := a.Next(); !IsHot(k) {
			got = append(got, k)
		}
	}
	if got[0] != 2 || got[1] != 6 || got[2] != 10 {
		t.Errorf("sequential under attack: %v, want 2 6 10", got)
	}
}

func TestWorkloadAttackFlags(t *testing.T) {
	w := DefaultWorkload()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	w.AddFlags(fs)
	if err := fs.Parse([]string{"--hot-keys", "10", "--hot-fraction", "0.9", "--hot-limit", "2"}); err != nil {
		t.Fatal(err)
	}
	if w.HotKeys != 10 || w.HotFraction != 0.9 || w.HotLimit != 2 || !w.Attack() || w.Validate() != nil {
		t.Errorf("parsed %+v (validate %v)", w, w.Validate())
	}
	if d := DefaultWorkload(); d.Attack() || d.HotLimit != DefaultHotLimit || d.Validate() != nil {
		t.Errorf("default workload %+v is an attack or invalid", d)
	}
	for name, mod := range map[string]func(*Workload){
		"batch":        func(w *Workload) { w.Batch = 10 },
		"hot limit":    func(w *Workload) { w.HotLimit = 0 },
		"fraction":     func(w *Workload) { w.HotFraction = 2 },
		"no fraction":  func(w *Workload) { w.HotFraction = 0 },
		"no hot keys":  func(w *Workload) { w.HotKeys = 0 },
		"negative hot": func(w *Workload) { w.HotKeys = -3 },
	} {
		bad := w
		mod(&bad)
		if bad.Validate() == nil {
			t.Errorf("%s: %+v validated", name, bad)
		}
	}
}

// hotTarget refuses every hot key and allows every normal one after a
// delay of its own, so the two classes' counts and latencies are told apart.
type hotTarget struct {
	hotDelay, normalDelay time.Duration
	hot, normal           atomic.Int64
}

func (h *hotTarget) Do(ctx context.Context, k int) (bool, error) {
	if IsHot(k) {
		h.hot.Add(1)
		time.Sleep(h.hotDelay)
		return false, nil
	}
	h.normal.Add(1)
	time.Sleep(h.normalDelay)
	if k%10 == 0 {
		return false, &StatusError{Status: 503, Code: "unavailable"}
	}
	return true, nil
}

func TestRunSplitsNormalAndHotKeys(t *testing.T) {
	w := testWorkload()
	w.HotKeys, w.HotFraction, w.HotLimit = 4, 0.7, 1
	tg := &hotTarget{hotDelay: 0, normalDelay: 2 * time.Millisecond}
	r, err := Run(context.Background(), w, tg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Normal == nil || r.Hot == nil || r.HotKeys != 4 || r.HotFraction != 0.7 || r.HotLimit != 1 {
		t.Fatalf("attack not reported: %+v", r)
	}
	if r.Hot.Allowed != 0 || r.Hot.Refused != tg.hot.Load() || r.Hot.Errors != 0 {
		t.Errorf("hot %+v, target refused %d", *r.Hot, tg.hot.Load())
	}
	if r.Normal.Refused != 0 || r.Normal.Allowed+r.Normal.Errors != tg.normal.Load() || r.Normal.Errors == 0 {
		t.Errorf("normal %+v, target answered %d", *r.Normal, tg.normal.Load())
	}
	if r.Allowed != r.Normal.Allowed || r.Refused != r.Hot.Refused || r.Errors != r.Normal.Errors {
		t.Errorf("totals %d/%d/%d do not add up to the classes", r.Allowed, r.Refused, r.Errors)
	}
	// Normal checks take ≥ 2 ms (a sleep), hot ones none: the latencies are
	// the classes' own.
	if r.Normal.P50 < 2*time.Millisecond || r.Hot.P50 >= r.Normal.P50 {
		t.Errorf("normal p50 %s, hot p50 %s", r.Normal.P50, r.Hot.P50)
	}

	// Without the attack there is no split.
	r, err = Run(context.Background(), testWorkload(), &hotTarget{}, nil)
	if err != nil || r.Normal != nil || r.Hot != nil {
		t.Errorf("no attack: normal %v hot %v err %v", r.Normal, r.Hot, err)
	}
}

func TestAttackReport(t *testing.T) {
	r := sampleResult()
	r.Protocol = "grpc"
	r.HotKeys, r.HotFraction, r.HotLimit = 10, 0.9, 1
	r.Normal = &KeyClass{Allowed: 900, Refused: 0, Errors: 1, P50: time.Millisecond, P99: 7 * time.Millisecond, Max: 9 * time.Millisecond}
	r.Hot = &KeyClass{Allowed: 10, Refused: 8000, P50: 500 * time.Microsecond, P99: 2 * time.Millisecond, Max: 3 * time.Millisecond}
	var line bytes.Buffer
	if err := WriteJSONLine(&line, r); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	json.Unmarshal(line.Bytes(), &raw)
	if raw["protocol"] != "grpc" || raw["hot_keys"] != 10.0 || raw["normal"].(map[string]any)["p99_ms"] != 7.0 {
		t.Errorf("JSON line %s", line.String())
	}
	back, err := ReadJSONLines(&line)
	if err != nil || len(back) != 1 || *back[0].Normal != *r.Normal || *back[0].Hot != *r.Hot || back[0].Protocol != "grpc" || back[0].HotFraction != 0.9 {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	var tbl bytes.Buffer
	WriteTable(&tbl, r)
	for _, want := range []string{"over grpc", "attack: 0.9 of checks on 10 hot keys limited to 1 per window",
		"normal keys", "p99 7.00ms", "hot keys", "refused 8,000"} {
		if !strings.Contains(tbl.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tbl.String())
		}
	}
	// In a comparison an attack run is measured against the baseline's
	// attack run, and shows its normal keys' p99.
	redisPlain := Result{System: "redis", Dist: "uniform", Batch: 1, Allowed: 1000, Elapsed: time.Second}
	redisAttack := redisPlain
	redisAttack.Allowed, redisAttack.HotKeys = 4000, 10
	redisAttack.Normal = &KeyClass{P99: 3 * time.Millisecond}
	mine := Result{System: "limitd", Dist: "uniform", Batch: 1, Allowed: 2000, Elapsed: time.Second, HotKeys: 10,
		Normal: &KeyClass{P99: 11 * time.Millisecond}}
	var cmp bytes.Buffer
	WriteComparison(&cmp, []Result{redisPlain, redisAttack, mine}, "redis")
	last := strings.Split(strings.TrimSpace(cmp.String()), "\n")[3]
	if !strings.Contains(last, "0.50x") || !strings.Contains(last, "11.0ms") || !strings.Contains(cmp.String(), "normal p99") {
		t.Errorf("comparison:\n%s", cmp.String())
	}
}
