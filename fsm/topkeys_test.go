package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

func TestTopKeysWindowsAndRefusals(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "api", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1h"})})
	start := t0 - t0%hour
	for i, k := range []string{"a", "b", "b", "c", "c", "c"} {
		d.one(start+int64(i)*sec, "api", k, 2) // c: 2 allowed, 1 refused
	}
	top := func(w time.Duration, by string) string {
		v := f.TopKeys(nodeapi.TopKeysQuery{Policy: "api", Window: w, By: by, Limit: 10})
		s := ""
		for _, k := range v.Keys {
			s += fmt.Sprintf("%s=%d ", k.Key, k.Count)
		}
		return s
	}
	if got := top(5*time.Minute, nodeapi.TopByAllowed); got != "b=4 c=4 a=2 " {
		t.Fatalf("allowed, 5m: %q", got)
	}
	if got := top(5*time.Minute, nodeapi.TopByRefused); got != "c=1 " {
		t.Fatalf("refused, 5m: %q", got)
	}
	// Six minutes on (leader time, from an entry), the 5-minute view is
	// empty and the hour's still counts.
	d.one(start+6*60*sec, "api", "d", 1)
	if got := top(5*time.Minute, nodeapi.TopByAllowed); got != "d=1 " {
		t.Fatalf("allowed, 5m later: %q", got)
	}
	if got := top(time.Hour, nodeapi.TopByAllowed); got != "b=4 c=4 a=2 d=1 " {
		t.Fatalf("allowed, 1h: %q", got)
	}
	d.one(start+2*hour, "api", "e", 1)
	if got := top(time.Hour, nodeapi.TopByAllowed); got != "e=1 " {
		t.Fatalf("allowed, 1h later: %q", got)
	}
	// A deleted policy's sketch goes with it.
	d.apply(EncodeDeletePolicy("api"))
	if got := top(time.Hour, nodeapi.TopByAllowed); got != "" {
		t.Fatalf("deleted: %q", got)
	}
}

// TestTopKeysBoundedAndTheSameOnEveryReplica: past the sketch's size the
// heavy keys stay, each count within its error of the truth, and two
// replicas applying the same log answer the same view.
func TestTopKeysBoundedAndTheSameOnEveryReplica(t *testing.T) {
	var views [2]nodeapi.TopKeys
	truth := map[string]int64{}
	for r := range views {
		f := openFSM(t, "", Options{})
		d := newDriver(t, f)
		d.putPolicy(Policy{Name: "api", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1_000_000, Window: "1h"})})
		now := t0 - t0%hour
		for i := 0; i < 2000; i++ {
			k := fmt.Sprintf("cold:%d", i)
			if i%4 == 0 {
				k = fmt.Sprintf("hot:%d", i%5)
			}
			d.one(now+int64(i)*int64(time.Millisecond), "api", k, 1)
			if r == 0 {
				truth[k]++
			}
		}
		views[r] = f.TopKeys(nodeapi.TopKeysQuery{Policy: "api", Window: 5 * time.Minute, By: nodeapi.TopByAllowed, Limit: topK})
		if n := f.top.policies["api"].minute[0].s[0].len() + f.top.policies["api"].minute[1].s[0].len(); n > 2*topK {
			t.Fatalf("sketch holds %d entries", n)
		}
		// Five minutes on, the minute's bucket is reused: its counts are
		// folded into the five-minute bucket, errors with them, and the
		// hour's view still bounds every hot key's true count.
		d.one(now+5*int64(time.Minute), "api", "late", 1)
		hour := f.TopKeys(nodeapi.TopKeysQuery{Policy: "api", Window: time.Hour, By: nodeapi.TopByAllowed, Limit: topK})
		for i, k := range hour.Keys[:5] {
			if k.Key[:4] != "hot:" || k.Count < truth[k.Key] || k.Count-k.Error > truth[k.Key] {
				t.Fatalf("hour, #%d %+v, true count %d", i, k, truth[k.Key])
			}
		}
		var folded []nodeapi.TopKey // the hour's view but the new minute's key: the fold, errors and all
		for _, k := range hour.Keys {
			if k.Key != "late" {
				folded = append(folded, k)
			}
		}
		if got, want := fmt.Sprint(folded), fmt.Sprint(views[r].Keys); got != want {
			t.Fatalf("hour after the fold %v, the minute's view before %v", got, want)
		}
	}
	if fmt.Sprint(views[0]) != fmt.Sprint(views[1]) {
		t.Fatalf("replicas differ:\n%v\n%v", views[0], views[1])
	}
	for i, k := range views[0].Keys[:5] {
		if k.Key[:4] != "hot:" || k.Count < truth[k.Key] || k.Count-k.Error > truth[k.Key] {
			t.Fatalf("#%d %+v, true count %d", i, k, truth[k.Key])
		}
	}
}
