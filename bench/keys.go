package bench

import (
	"fmt"
	"math/rand/v2"
)

// Key distributions accepted by NewKeyGen.
const (
	DistUniform    = "uniform"
	DistZipf       = "zipf"
	DistSequential = "sequential" // every key in turn: worker i takes i, i+C, i+2C, …
)

// DefaultZipfS is the Zipf exponent used unless told otherwise: a web-like
// skew where the hottest key gets a few percent of the traffic.
const DefaultZipfS = 1.1

// KeyGen yields key indexes in [0, keys). It is not safe for concurrent use:
// every worker owns one, seeded from the run seed and the worker's number, so a
// run's key sequence is reproducible whatever the target.
type KeyGen interface {
	Next() int
}

// NewKeyGen returns a generator for dist over keys keys. s is the Zipf
// exponent (must be > 1; ignored for uniform). Generators with the same
// (seed, stream) produce the same sequence.
func NewKeyGen(dist string, keys int, s float64, seed, stream uint64) (KeyGen, error) {
	if keys < 1 {
		return nil, fmt.Errorf("keys must be at least 1, got %d", keys)
	}
	r := rand.New(rand.NewPCG(seed, stream))
	switch dist {
	case DistUniform:
		return &uniformGen{r: r, n: keys}, nil
	case DistSequential:
		return &sequentialGen{next: int(stream % uint64(keys)), step: 1, n: keys}, nil
	case DistZipf:
		if !(s > 1) {
			return nil, fmt.Errorf("zipf exponent must be > 1, got %g", s)
		}
		if keys == 1 {
			return &uniformGen{r: r, n: 1}, nil
		}
		// rand.Zipf draws k in [0, imax] with P(k) ∝ (v + k)^-s: key 0 is the
		// hottest, key 1 the next and so on.
		return &zipfGen{z: rand.NewZipf(r, s, 1, uint64(keys-1))}, nil
	}
	return nil, fmt.Errorf("unknown key distribution %q (want %s, %s or %s)", dist, DistUniform, DistZipf, DistSequential)
}

type uniformGen struct {
	r *rand.Rand
	n int
}

func (g *uniformGen) Next() int { return g.r.IntN(g.n) }

type zipfGen struct{ z *rand.Zipf }

func (g *zipfGen) Next() int { return int(g.z.Uint64()) }

// sequentialGen walks the keys in order with a stride, so that workers with
// distinct starts and a stride equal to their number touch every key exactly
// once per pass: the way to fill a store with a known number of keys.
type sequentialGen struct{ next, step, n int }

func (g *sequentialGen) Next() int {
	k := g.next
	g.next = (g.next + g.step) % g.n
	return k
}

// Stride makes the generator step by the number of workers, when it walks
// the keys in sequence; other distributions ignore it.
func Stride(g KeyGen, workers int) {
	if a, ok := g.(*attackGen); ok {
		g = a.normal
	}
	if s, ok := g.(*sequentialGen); ok && workers > 0 {
		s.step = workers
	}
}

// Hot keys of the attack workload (Workload.HotKeys) are passed to targets
// as negative key indexes, so a target tells them from the normal keys
// [0, Keys) without knowing the workload: hot key h is HotIndex(h).

// HotIndex is the key index of hot key h (h ≥ 0).
func HotIndex(h int) int { return -1 - h }

// IsHot reports whether key index i is a hot key.
func IsHot(i int) bool { return i < 0 }

// HotNumber is h for the key index HotIndex(h).
func HotNumber(i int) int { return -1 - i }

// attackGen sends a fraction of the checks to a few hot keys and the rest to
// the normal generator: the shape of abuse, scraping or a retry storm.
type attackGen struct {
	normal KeyGen
	r      *rand.Rand
	hot    int
	frac   float64
}

func (g *attackGen) Next() int {
	if g.r.Float64() < g.frac {
		return HotIndex(g.r.IntN(g.hot))
	}
	return g.normal.Next()
}

// NewAttackGen wraps normal: with probability frac a check goes to one of
// hot hot keys (uniformly), otherwise to normal's next key. hot = 0 or
// frac = 0 returns normal itself.
func NewAttackGen(normal KeyGen, hot int, frac float64, seed, stream uint64) (KeyGen, error) {
	switch {
	case hot < 0:
		return nil, fmt.Errorf("hot keys must not be negative, got %d", hot)
	case !(frac >= 0 && frac <= 1):
		return nil, fmt.Errorf("hot fraction must be in [0, 1], got %g", frac)
	case hot > 0 && frac == 0, hot == 0 && frac > 0:
		return nil, fmt.Errorf("an attack needs both hot keys and a hot fraction (got %d keys, fraction %g)", hot, frac)
	case hot == 0:
		return normal, nil
	}
	// A stream of its own, so the normal keys' sequence is the same with
	// and without the attack.
	return &attackGen{normal: normal, r: rand.New(rand.NewPCG(seed^0x5eed_a77ac, stream)), hot: hot, frac: frac}, nil
}
