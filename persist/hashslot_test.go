package persist

import (
	"fmt"
	"reflect"
	"sort"
	"testing"
)

// ScanLiveStates sees what the writer sees — states committed, in a commit
// in flight, and written since (in the cache only) — and not those deleted
// since, whatever the cache holds; MaxRequestExpiry the latest request id.
func TestScanLiveStatesIsTheWritersView(t *testing.T) {
	for _, opts := range []Options{{NoSync: true, CacheKeys: 1}, {NoSync: true, CommitEvery: 4, Background: true}} {
		t.Run(fmt.Sprintf("commitEvery%d", opts.CommitEvery), func(t *testing.T) {
			s, _ := openTemp(t, opts)
			putStates(t, s, 1, 10, "pa", "pb", "qa")
			if err := s.Commit(); err != nil {
				t.Fatal(err)
			}
			putStates(t, s, 2, 10, "pc")
			var got []string
			var latest int64
			err := s.Update(func(tx *Tx) error {
				st, err := tx.State([]byte("pb"))
				if err != nil {
					return err
				}
				if err := tx.DeleteState([]byte("pb"), st); err != nil {
					return err
				}
				prev, _ := tx.State([]byte("pd"))
				if err := tx.PutState([]byte("pd"), prev, []byte("d"), 99); err != nil {
					return err
				}
				for i, id := range []string{"r1", "r2"} {
					if err := tx.PutRequest([]byte(id), Request{}, []byte("x"), int64(500+i*7)); err != nil {
						return err
					}
				}
				if latest, err = tx.MaxRequestExpiry(); err != nil {
					return err
				}
				tx.SetApplied(3)
				return tx.ScanLiveStates([]byte("p"), nil, func(k []byte, st State) error {
					got = append(got, fmt.Sprintf("%s=%s@%d", k, st.Data, st.Expiry))
					return nil
				})
			})
			if err != nil {
				t.Fatal(err)
			}
			sort.Strings(got)
			want := []string{"pa=state:pa@110", "pc=state:pc@110", "pd=d@99"}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("scan %v, want %v", got, want)
			}
			if latest != 507 {
				t.Fatalf("latest request expiry %d, want 507", latest)
			}
		})
	}
}
