package bench

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/client"
)

// A pair unit is two requests: an acquire and the release of its slot, or
// a reserve and the settle of its reservation at half the estimate; a
// refused first half is a refusal with no second request.
func TestClientTargetPairs(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	var settled []int64
	refuse := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		b, _ := io.ReadAll(r.Body)
		var in map[string]any
		_ = json.Unmarshal(b, &in)
		seen[r.URL.Path]++
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/check" && refuse:
			_, _ = io.WriteString(w, `{"allowed":false,"limit":1,"remaining":0,"reset_after_ms":1,"retry_after_ms":1,"delay_ms":0}`)
		case r.URL.Path == "/v1/check" && in["reserve"] != nil:
			_, _ = io.WriteString(w, `{"allowed":true,"limit":100,"remaining":90,"reset_after_ms":1,"retry_after_ms":0,"delay_ms":0,"reservation":"r1.x","reservation_expires_ms":60000}`)
		case r.URL.Path == "/v1/check":
			_, _ = io.WriteString(w, `{"allowed":true,"limit":1,"remaining":0,"reset_after_ms":1,"retry_after_ms":0,"delay_ms":0,"slot":"s","slot_expires_ms":30000}`)
		case r.URL.Path == "/v1/release":
			_, _ = io.WriteString(w, `{"released":true,"slot":"s","slot_expires_ms":0,"limit":1,"remaining":1}`)
		case r.URL.Path == "/v1/settle":
			settled = append(settled, int64(in["cost"].(float64)))
			_, _ = io.WriteString(w, `{"credited":5,"debt":0,"rolled":false,"limit":100,"remaining":95,"reset_after_ms":1,"retry_after_ms":0}`)
		}
	}))
	defer srv.Close()
	for _, pair := range []string{PairAcquire, PairReserve} {
		tg, err := NewClientTarget(ClientConfig{Addrs: []string{srv.URL}, Check: CheckSpec{Policy: "p", Cost: 10}, Pair: pair, PairHold: time.Minute,
			Options: []client.Option{client.WithCoalescing(client.Coalescing{Disabled: true})}})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := tg.Do(context.Background(), 1); !ok || err != nil {
			t.Fatalf("%s: %v %v", pair, ok, err)
		}
		mu.Lock()
		refuse = true
		mu.Unlock()
		if ok, err := tg.Do(context.Background(), 2); ok || err != nil {
			t.Fatalf("%s refused: %v %v", pair, ok, err)
		}
		mu.Lock()
		refuse = false
		mu.Unlock()
		tg.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["/v1/check"] != 4 || seen["/v1/release"] != 1 || seen["/v1/settle"] != 1 || len(settled) != 1 || settled[0] != 5 {
		t.Fatalf("requests %v, settled %v", seen, settled)
	}
}
