package persist

import (
	"bytes"
	"fmt"
	"math/rand"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// cacheOp is one step of a random workload on the store.
type cacheOp struct {
	kind   int // 0 put, 1 delete, 2 expire, 3 request
	key    string
	data   string
	expiry int64
	now    int64
	max    int
}

func randomCacheOps(n int) []cacheOp {
	rng := rand.New(rand.NewSource(3))
	now := int64(1000)
	ops := make([]cacheOp, n)
	for i := range ops {
		now += int64(rng.Intn(20))
		op := cacheOp{key: fmt.Sprintf("key-%02d", rng.Intn(40)), now: now}
		switch r := rng.Intn(20); {
		case r < 12:
			// Expiries move later and sometimes earlier than the index.
			op.data, op.expiry = fmt.Sprintf("d%d", i), now+int64(rng.Intn(200))-20
		case r < 14:
			op.kind = 1
		case r < 19:
			op.kind, op.max = 2, 1+rng.Intn(6)
		default:
			op.kind, op.expiry = 3, now+int64(rng.Intn(100))
		}
		ops[i] = op
	}
	return ops
}

// applyCacheOp applies op in tx and returns what it observed.
func applyCacheOp(tx *Tx, op cacheOp) (string, error) {
	switch op.kind {
	case 0, 1:
		st, err := tx.State([]byte(op.key))
		if err != nil {
			return "", err
		}
		obs := fmt.Sprintf("%v %q %d", st.Found, st.Data, st.Expiry)
		if op.kind == 0 {
			return obs, tx.PutState([]byte(op.key), st, []byte(op.data), op.expiry)
		}
		return obs, tx.DeleteState([]byte(op.key), st)
	case 2:
		n, err := tx.Expire(op.now, op.max)
		return fmt.Sprint(n), err
	default:
		id := []byte("req-" + op.key)
		r, err := tx.Request(id)
		if err != nil {
			return "", err
		}
		return "", tx.PutRequest(id, r, []byte("result"), op.expiry)
	}
}

// TestStateCacheIsInvisible: whatever the cache bound, the commit interval
// and how operations are grouped into Updates, every read, every expiry
// count, the meta record and the committed file (its digest covers the
// state, the expiry index and the requests) are those of a store that
// commits after every operation, where the cache holds nothing between
// operations.
func TestStateCacheIsInvisible(t *testing.T) {
	ops := randomCacheOps(3000)
	run := func(t *testing.T, opts Options, perUpdate int) ([]string, string, Meta) {
		s, err := Open(filepath.Join(t.TempDir(), "fsm.db"), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var obs []string
		for i := 0; i < len(ops); i += perUpdate {
			update(t, s, func(tx *Tx) error {
				for _, op := range ops[i:min(i+perUpdate, len(ops))] {
					o, err := applyCacheOp(tx, op)
					if err != nil {
						return err
					}
					obs = append(obs, o)
					tx.SetLastTime(op.now)
				}
				tx.SetApplied(uint64(i + 1))
				return nil
			})
		}
		if err := s.Commit(); err != nil {
			t.Fatal(err)
		}
		d, err := s.Digest()
		if err != nil {
			t.Fatal(err)
		}
		m := s.Meta()
		m.AppliedIndex = 0 // differs with the grouping
		return obs, d, m
	}
	wantObs, wantDigest, wantMeta := run(t, Options{NoSync: true}, 1)
	removed := 0
	for i, o := range wantObs {
		if ops[i].kind == 2 && o != "0" {
			removed++
		}
	}
	if removed < 20 {
		t.Fatalf("weak workload: only %d sweeps removed something", removed)
	}
	for _, tc := range []struct {
		name          string
		commit, cache int
		perUpdate     int
	}{
		{"one update per op, cache of 1", 0, 1, 1},
		{"updates of 10", 0, 0, 10},
		{"shared commits of 25 updates", 25, 0, 3},
		{"shared commits, cache of 4", 40, 4, 2},
		{"one long transaction", 100000, 0, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs, d, m := run(t, Options{NoSync: true, CommitEvery: tc.commit, CacheKeys: tc.cache}, tc.perUpdate)
			for i := range wantObs {
				if obs[i] != wantObs[i] {
					t.Fatalf("op %d (%+v): observed %s, want %s", i, ops[i], obs[i], wantObs[i])
				}
			}
			if m != wantMeta {
				t.Fatalf("meta %+v, want %+v", m, wantMeta)
			}
			if d != wantDigest {
				t.Fatal("the committed file differs")
			}
		})
	}
}

// TestStateCacheWritesLessThanOncePerCheck: a key written many times between
// commits is written to the file once, and one created and deleted between
// commits never reaches it.
func TestStateCacheWritesLessThanOncePerCheck(t *testing.T) {
	s, path := openTemp(t, Options{NoSync: true, CommitEvery: 1000})
	update(t, s, func(tx *Tx) error {
		for i := 0; i < 100; i++ {
			for _, k := range []string{"busy", "short-lived"} {
				st, err := tx.State([]byte(k))
				if err != nil {
					return err
				}
				if err := tx.PutState([]byte(k), st, []byte(fmt.Sprintf("v%d", i)), 5000); err != nil {
					return err
				}
			}
		}
		st, _ := tx.State([]byte("short-lived"))
		return tx.DeleteState([]byte("short-lived"), st)
	})
	// Nothing reached the file before the commit.
	if err := s.db.View(func(btx *bolt.Tx) error {
		if v := btx.Bucket(bucketState).Get([]byte("busy")); v != nil {
			t.Error("a state reached the file before the commit")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	if st := readState(t, s, "busy"); !bytes.Equal(st.Data, []byte("v99")) {
		t.Fatalf("busy = %q after the commit", st.Data)
	}
	if readState(t, s, "short-lived").Found {
		t.Fatal("a key created and deleted between commits reached the file")
	}
	if m := s.Meta(); m.Keys != 1 {
		t.Fatalf("keys %d, want 1", m.Keys)
	}
	// 200 puts and a delete reached the file as one write: "busy" once.
	if n := s.FlushedKeys(); n != 1 {
		t.Fatalf("FlushedKeys %d after one commit, want 1", n)
	}
	_ = path
}

// TestStateCacheIsBounded: after a commit the cache holds at most CacheKeys
// keys; between commits it keeps every dirty key, and evicted keys read back
// from the file.
func TestStateCacheIsBounded(t *testing.T) {
	s, _ := openTemp(t, Options{NoSync: true, CommitEvery: 1000, CacheKeys: 100})
	var keys []string
	for i := 0; i < 1000; i++ {
		keys = append(keys, fmt.Sprintf("key-%04d", i))
	}
	putStates(t, s, 1, 1000, keys...)
	if n := s.cache.Len(); n != 1000 {
		t.Fatalf("%d keys cached before the commit, want all 1000 dirty ones", n)
	}
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := s.cache.Len(); n > 100 {
		t.Fatalf("%d keys cached after the commit, bound 100", n)
	}
	update(t, s, func(tx *Tx) error {
		for _, k := range keys {
			st, err := tx.State([]byte(k))
			if err != nil {
				return err
			}
			if string(st.Data) != "state:"+k {
				return fmt.Errorf("%s reads %q after eviction", k, st.Data)
			}
		}
		return nil
	})
}
