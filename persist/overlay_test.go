package persist

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	berrors "go.etcd.io/bbolt/errors"
	"pgregory.net/rapid"
)

// overlayStep is one Update's worth of random operations: the same on the
// store under test and on the reference.
type overlayOp struct {
	kind   int // 0 put state, 1 delete state, 2 expire, 3 put request, 4 put policy, 5 delete policy, 6 put node, 7 delete node
	key    string
	data   string
	expiry int64
	max    int
}

func drawOverlayOp(t *rapid.T, now int64, i int) overlayOp {
	op := overlayOp{
		kind: rapid.IntRange(0, 7).Draw(t, "kind"),
		key:  fmt.Sprintf("k%d", rapid.IntRange(0, 11).Draw(t, "key")),
	}
	switch op.kind {
	case 0, 3:
		op.expiry = now + int64(rapid.IntRange(-20, 200).Draw(t, "expiry"))
		// Sometimes a state too long for an entry's inline bytes.
		op.data = fmt.Sprintf("d%d", i) + strings.Repeat("x", rapid.SampledFrom([]int{0, 0, 40}).Draw(t, "pad"))
	case 2:
		op.max = rapid.IntRange(1, 6).Draw(t, "max")
	case 4, 6:
		op.data = fmt.Sprintf("v%d", i)
	}
	return op
}

// applyOverlayOp applies op at now and returns what it observed.
func applyOverlayOp(tx *Tx, op overlayOp, now int64) (string, error) {
	k := []byte(op.key)
	switch op.kind {
	case 0, 1:
		st, err := tx.State(k)
		if err != nil {
			return "", err
		}
		obs := fmt.Sprintf("state %v %q %d", st.Found, st.Data, st.Expiry)
		if op.kind == 0 {
			return obs, tx.PutState(k, st, []byte(op.data), op.expiry)
		}
		return obs, tx.DeleteState(k, st)
	case 2:
		n, err := tx.Expire(now, op.max)
		return fmt.Sprint("expired ", n), err
	case 3:
		r, err := tx.Request(k)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("request %v %q %d", r.Found, r.Result, r.Expiry), tx.PutRequest(k, r, []byte(op.data), op.expiry)
	case 4:
		return "", tx.PutPolicy(op.key, []byte(op.data))
	case 5:
		ok, err := tx.DeletePolicy(op.key)
		return fmt.Sprint("deleted policy ", ok), err
	case 6:
		return "", tx.PutNode(op.key, op.data)
	default:
		return "", tx.DeleteNode(op.key)
	}
}

// readAll describes everything a writer can read: every key's state and
// request, every policy and node.
func readAll(tx *Tx) (string, error) {
	var b strings.Builder
	for i := 0; i < 12; i++ {
		k := []byte(fmt.Sprintf("k%d", i))
		st, err := tx.State(k)
		if err != nil {
			return "", err
		}
		r, err := tx.Request(k)
		if err != nil {
			return "", err
		}
		p, err := tx.Policy(string(k))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s: %v %q %d | %v %q %d | %q\n", k, st.Found, st.Data, st.Expiry, r.Found, r.Result, r.Expiry, p)
	}
	if err := tx.ForEachPolicy(func(name string, enc []byte) error {
		fmt.Fprintf(&b, "policy %s=%s\n", name, enc)
		return nil
	}); err != nil {
		return "", err
	}
	err := tx.ForEachNode(func(id, addr string) error {
		fmt.Fprintf(&b, "node %s=%s\n", id, addr)
		return nil
	})
	return b.String(), err
}

// TestOverlayEqualsOneGeneration: a store whose commits run beside its
// Updates (Background) reads, sweeps and digests exactly like one that
// commits after every Update (and whose request sweep starts from the front
// of its index every time), at every step, whatever commits are in flight
// when: a commit is started at random points and held in flight (its
// goroutine blocked in the test hook) across later Updates, which then read
// through the current generation, the frozen one and the file before the
// commit; once it has finished, the next Update reads the file after it. In
// some runs commits are not held and finish whenever they do.
func TestOverlayEqualsOneGeneration(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp("", "overlay")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		ref, err := Open(filepath.Join(dir, "ref.db"), Options{NoSync: true})
		if err != nil {
			rt.Fatal(err)
		}
		defer ref.Close()
		ref.testNoSkip = true // the request sweep re-reads its index from the start
		sub, err := Open(filepath.Join(dir, "sub.db"), Options{
			NoSync:      true,
			Background:  true,
			CommitEvery: rapid.SampledFrom([]int{2, 5, 1 << 20}).Draw(rt, "commitEvery"),
			CacheKeys:   rapid.IntRange(1, 16).Draw(rt, "cacheKeys"),
		})
		if err != nil {
			rt.Fatal(err)
		}
		var gate chan struct{}
		release := func() {
			if gate != nil {
				close(gate)
				gate = nil
			}
		}
		defer func() {
			release()
			if err := sub.Close(); err != nil {
				rt.Error(err)
			}
		}()
		// hold makes the next commit wait in its goroutine until release.
		hold := func() {
			g := make(chan struct{})
			gate = g
			sub.testHookCommit = func() { <-g }
		}
		both := func(what string, fn func(*Tx) (string, error)) {
			var want, got string
			if err := ref.Update(func(tx *Tx) (err error) { want, err = fn(tx); return err }); err != nil {
				rt.Fatalf("reference %s: %v", what, err)
			}
			if err := sub.Update(func(tx *Tx) (err error) { got, err = fn(tx); return err }); err != nil {
				rt.Fatalf("%s: %v", what, err)
			}
			if got != want {
				rt.Fatalf("%s: observed\n%s\nwant\n%s", what, got, want)
			}
		}
		// free: commits run as the scheduler lets them, beside the Updates
		// that read the frozen generation (for the race detector; the
		// observations must not depend on it either).
		free := rapid.Bool().Draw(rt, "free")
		now, applied := int64(1000), uint64(0)
		steps := rapid.IntRange(1, 120).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			// Every commit (StartCommit's, or the CommitEvery-th Update's)
			// stays in flight until a step lets it finish: the run does not
			// depend on the scheduler.
			if gate == nil && !free {
				hold()
			}
			switch rapid.IntRange(0, 9).Draw(rt, "step") {
			case 7: // start a commit
				if err := sub.StartCommit(); err != nil {
					rt.Fatal(err)
				}
			case 8: // let the commit in flight finish (the next Update collects it)
				if fl := sub.flight; fl != nil {
					release()
					<-fl
				}
			case 9: // a synchronous commit: digests agree
				release()
				sub.testHookCommit = nil
				if err := sub.Commit(); err != nil {
					rt.Fatal(err)
				}
				d1, err1 := ref.Digest()
				d2, err2 := sub.Digest()
				if err1 != nil || err2 != nil || d1 != d2 {
					rt.Fatalf("digest %s (%v), want %s (%v)", d2, err2, d1, err1)
				}
			default:
				now += int64(rapid.IntRange(0, 30).Draw(rt, "advance"))
				applied++
				n := rapid.IntRange(1, 4).Draw(rt, "ops")
				ops := make([]overlayOp, n)
				for j := range ops {
					ops[j] = drawOverlayOp(rt, now, i)
				}
				both(fmt.Sprintf("step %d %+v", i, ops), func(tx *Tx) (string, error) {
					var obs []string
					for _, op := range ops {
						o, err := applyOverlayOp(tx, op, now)
						if err != nil {
							return "", err
						}
						obs = append(obs, o)
					}
					tx.SetLastTime(now)
					tx.SetApplied(applied)
					return strings.Join(obs, "; "), nil
				})
			}
			both(fmt.Sprintf("read after step %d", i), readAll)
			if sub.Meta() != ref.Meta() {
				rt.Fatalf("meta %+v, want %+v", sub.Meta(), ref.Meta())
			}
		}
		// A clean stop with a commit in flight keeps everything.
		if rapid.Bool().Draw(rt, "inFlightAtClose") {
			if gate == nil && !free {
				hold()
			}
			if err := sub.StartCommit(); err != nil {
				rt.Fatal(err)
			}
		}
		release()
		if err := sub.Close(); err != nil {
			rt.Fatal(err)
		}
		if sub, err = Open(filepath.Join(dir, "sub.db"), Options{NoSync: true}); err != nil {
			rt.Fatal(err)
		}
		d1, err1 := ref.Digest()
		d2, err2 := sub.Digest()
		if err1 != nil || err2 != nil || d1 != d2 || sub.Meta() != ref.Meta() {
			rt.Fatalf("after a clean stop: digest %s (%v) meta %+v, want %s (%v) %+v", d2, err2, sub.Meta(), d1, err1, ref.Meta())
		}
	})
}

// A commit that fails in its goroutine is reported to the writer by its next
// call, and the store falls back to the file: the Updates the commit carried
// are gone (the caller stops and rebuilds from Raft).
func TestBackgroundCommitFailureIsReported(t *testing.T) {
	s, _ := openTemp(t, Options{NoSync: true, Background: true, CommitEvery: 1 << 20, MaxSize: 1 << 20})
	putStates(t, s, 1, 10, "a")
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	putStates(t, s, 2, 20, "b")
	update(t, s, func(tx *Tx) error {
		prev, err := tx.State([]byte("big"))
		if err != nil {
			return err
		}
		tx.SetApplied(3)
		return tx.PutState([]byte("big"), prev, bytes.Repeat([]byte("x"), 4<<20), 20)
	})
	if err := s.StartCommit(); err != nil {
		t.Fatalf("StartCommit = %v before the commit ran", err)
	}
	<-s.flight
	if err := s.StartCommit(); !errors.Is(err, berrors.ErrMaxSizeReached) {
		t.Fatalf("after a failed background commit StartCommit = %v", err)
	}
	if m := s.Meta(); m.AppliedIndex != 1 || readState(t, s, "b").Found {
		t.Fatalf("after a failed commit: meta %+v, want the file's (applied 1)", m)
	}
	update(t, s, func(tx *Tx) error {
		st, err := tx.State([]byte("b"))
		if err == nil && st.Found {
			err = errors.New("the writer still reads a lost Update")
		}
		return err
	})
}
