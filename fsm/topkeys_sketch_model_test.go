package fsm

import (
	"fmt"
	"math/rand"
	"testing"

	"pgregory.net/rapid"
)

// refSketch is the specification of the sketch: Space-Saving by linear
// scans, evicting the least count (ties: the greatest hash, then key).
type refSketch struct {
	keys     []string
	cnt, err []int64
}

func (r *refSketch) add(key string, n, e int64) {
	for i, k := range r.keys {
		if k == key {
			r.cnt[i] += n
			r.err[i] += e
			return
		}
	}
	if len(r.keys) < topK {
		r.keys, r.cnt, r.err = append(r.keys, key), append(r.cnt, n), append(r.err, e)
		return
	}
	m := 0
	for i := 1; i < len(r.keys); i++ {
		hi, hm := keyHash([]byte(r.keys[i])), keyHash([]byte(r.keys[m]))
		if r.cnt[i] < r.cnt[m] || r.cnt[i] == r.cnt[m] && (hi > hm || hi == hm && r.keys[i] > r.keys[m]) {
			m = i
		}
	}
	r.keys[m], r.err[m] = key, r.cnt[m]+e
	r.cnt[m] += n
}

func (r *refSketch) view() map[string][2]int64 {
	v := map[string][2]int64{}
	for i, k := range r.keys {
		v[k] = [2]int64{r.cnt[i], r.err[i]}
	}
	return v
}

func sketchView(s *sketch) map[string][2]int64 {
	v := map[string][2]int64{}
	for i := 0; i < s.len(); i++ {
		v[string(s.d.keys[i])] = [2]int64{s.d.cnt(i), s.d.err[i]}
	}
	return v
}

// TestSketchModel adds random streams (more keys than the sketch holds,
// resets between) to the sketch and to refSketch, and checks after each add
// that both hold the same keys with the same counts and errors, that the
// heap is in eviction order and its root the entry refSketch would evict
// next, and that every key held is found through the index. Fails if the index loses a key (a
// broken backward-shift deletion), the heap evicts another entry than the
// eviction order says, or a count or error differs.
func TestSketchModel(t *testing.T) {
	total := 0
	defer func() {
		if !t.Failed() && total == 0 {
			t.Error("no stream evicted: the test would not see a broken eviction")
		}
	}()
	rapid.Check(t, func(rt *rapid.T) {
		var s sketch
		ref := &refSketch{}
		// The stream's shape from a seeded generator, not draws per step:
		// rapid's draws lean to small values (a reset at every other step,
		// a few keys), and such streams never fill the sketch, so never
		// evict.
		rng := rand.New(rand.NewSource(rapid.Int64().Draw(rt, "seed")))
		nkeys := []int{8, topK, topK + 8, 2 * topK, 4 * topK}[rng.Intn(5)]
		evictions := 0
		for step, steps := 0, rapid.IntRange(200, 800).Draw(rt, "steps"); step < steps; step++ {
			if rng.Intn(100) == 0 {
				s.reset()
				ref = &refSketch{}
			}
			key := fmt.Sprintf("k%d", rng.Intn(nkeys))
			if len(ref.keys) > 0 && rapid.Bool().Draw(rt, "held") {
				key = rapid.SampledFrom(ref.keys).Draw(rt, "held key") // a hit, the root's too
			}
			n := rapid.Int64Range(1, 5).Draw(rt, "n")
			e := rapid.SampledFrom([]int64{0, 0, 0, 2}).Draw(rt, "error") // a folded minute's error
			if s.len() == topK && s.d.find([]byte(key), keyHash([]byte(key))) < 0 {
				evictions++
			}
			s.add([]byte(key), keyHash([]byte(key)), n, e)
			ref.add(key, n, e)
			got, want := sketchView(&s), ref.view()
			if fmt.Sprint(got) != fmt.Sprint(want) {
				rt.Fatalf("step %d: sketch %v, model %v", step, got, want)
			}
			for p := 0; p < s.len(); p++ {
				if step == steps-1 && p == 0 {
					rt.Logf("n=%d nkeys=%d", s.len(), nkeys)
				}
				if x := s.d.heap[p]; x.h != s.d.h[x.e] || x.h != keyHash(s.d.keys[x.e]) || int(s.d.pos[x.e]) != p {
					rt.Fatalf("step %d: heap place %d holds a stale hash or position for entry %d", step, p, x.e)
				}
			}
			for p := 1; p < s.len(); p++ {
				if s.d.less(&s.d.heap[p], &s.d.heap[(p-1)/2]) {
					rt.Fatalf("step %d: heap order broken at %d", step, p)
				}
			}
			for k := range want {
				if s.d.find([]byte(k), keyHash([]byte(k))) < 0 {
					rt.Fatalf("step %d: %q held but not found through the index", step, k)
				}
			}
			if len(ref.keys) == topK {
				probe := &refSketch{keys: append([]string(nil), ref.keys...), cnt: append([]int64(nil), ref.cnt...), err: append([]int64(nil), ref.err...)}
				probe.add("\x00newcomer", 1, 0)
				if evicted := string(s.d.keys[s.d.heap[0].e]); probe.view()[evicted] != ([2]int64{}) {
					rt.Fatalf("step %d: the heap's root %q is not the model's next eviction", step, evicted)
				}
			}
		}
		total += evictions
	})
}
