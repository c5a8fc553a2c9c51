package bench

import (
	"math"
	"testing"
)

func sample(t *testing.T, dist string, keys int, s float64, seed, stream uint64, n int) []int {
	t.Helper()
	g, err := NewKeyGen(dist, keys, s, seed, stream)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int, n)
	for i := range out {
		out[i] = g.Next()
		if out[i] < 0 || out[i] >= keys {
			t.Fatalf("%s: key %d outside [0, %d)", dist, out[i], keys)
		}
	}
	return out
}

func TestZipfSkewMatchesDistribution(t *testing.T) {
	const keys, s, n = 100_000, 1.1, 200_000
	counts := make([]int, keys)
	for _, k := range sample(t, DistZipf, keys, s, 7, 0, n) {
		counts[k]++
	}
	// P(k) = (1+k)^-s / H, computed here from the definition.
	var h float64
	for k := range keys {
		h += math.Pow(float64(1+k), -s)
	}
	for _, top := range []int{1, 10, 100, 1000} {
		var want float64
		got := 0
		for k := range top {
			want += math.Pow(float64(1+k), -s) / h
			got += counts[k]
		}
		share := float64(got) / n
		if math.Abs(share-want) > 0.01 {
			t.Errorf("top %d keys got %.4f of the traffic, want %.4f ± 0.01", top, share, want)
		}
	}
	// The hottest keys are the lowest indexes, in order.
	if !(counts[0] > counts[1] && counts[1] > counts[3] && counts[3] > counts[30]) {
		t.Errorf("counts not decreasing with rank: %d %d %d %d", counts[0], counts[1], counts[3], counts[30])
	}
}

func TestUniformCoversEveryKeyEvenly(t *testing.T) {
	const keys, n = 1000, 200_000
	counts := make([]int, keys)
	for _, k := range sample(t, DistUniform, keys, 0, 3, 1, n) {
		counts[k]++
	}
	mean := float64(n) / keys // 200, standard deviation ≈ 14
	var chi2 float64
	for k, c := range counts {
		if c < 120 || c > 280 {
			t.Errorf("key %d drawn %d times, want about %.0f", k, c, mean)
		}
		chi2 += (float64(c) - mean) * (float64(c) - mean) / mean
	}
	// 999 degrees of freedom: mean 999, sd ≈ 45; 1200 is > 4 sd.
	if chi2 > 1200 {
		t.Errorf("chi-square %.0f: not uniform", chi2)
	}
}

func TestKeyGenDeterministic(t *testing.T) {
	for _, dist := range []string{DistUniform, DistZipf} {
		a := sample(t, dist, 10_000, DefaultZipfS, 42, 5, 1000)
		b := sample(t, dist, 10_000, DefaultZipfS, 42, 5, 1000)
		otherStream := sample(t, dist, 10_000, DefaultZipfS, 42, 6, 1000)
		otherSeed := sample(t, dist, 10_000, DefaultZipfS, 43, 5, 1000)
		same := func(x, y []int) bool {
			for i := range x {
				if x[i] != y[i] {
					return false
				}
			}
			return true
		}
		if !same(a, b) {
			t.Errorf("%s: same seed and stream gave different sequences", dist)
		}
		if same(a, otherStream) {
			t.Errorf("%s: another stream (worker) gave the same sequence", dist)
		}
		if same(a, otherSeed) {
			t.Errorf("%s: another seed gave the same sequence", dist)
		}
	}
}

func TestNewKeyGenErrors(t *testing.T) {
	tests := []struct {
		name string
		dist string
		keys int
		s    float64
	}{
		{"unknown dist", "normal", 10, 1.1},
		{"no keys", DistUniform, 0, 1.1},
		{"zipf exponent 1", DistZipf, 10, 1},
		{"zipf exponent NaN", DistZipf, 10, math.NaN()},
	}
	for _, tt := range tests {
		if _, err := NewKeyGen(tt.dist, tt.keys, tt.s, 1, 0); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
	// One key is a valid (degenerate) workload for both.
	for _, dist := range []string{DistUniform, DistZipf} {
		for _, k := range sample(t, dist, 1, DefaultZipfS, 1, 0, 10) {
			if k != 0 {
				t.Errorf("%s over one key drew %d", dist, k)
			}
		}
	}
}

// Sequential workers with a stride of their number cover every key exactly
// once per pass.
func TestSequentialCoversEveryKeyOnce(t *testing.T) {
	const keys, workers = 1000, 7
	seen := make([]int, keys)
	gens := make([]KeyGen, workers)
	for i := range gens {
		g, err := NewKeyGen(DistSequential, keys, 0, 1, uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		Stride(g, workers)
		gens[i] = g
	}
	for n := 0; n < keys; n++ {
		seen[gens[n%workers].Next()]++
	}
	for k, c := range seen {
		if c != 1 {
			t.Fatalf("key %d drawn %d times in one pass", k, c)
		}
	}
}
