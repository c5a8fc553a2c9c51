package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/limitd/limitd/client"
)

// TestWatchEventsDeliversThresholdsAndResumes: WatchEvents hands each
// threshold a check crosses to fn with its id, type and body; fn's error
// ends the watch with that error; a watch from an id starts after it (fails
// if the client loses a field of the SSE event or ignores Last-Event-ID).
func TestWatchEventsDeliversThresholdsAndResumes(t *testing.T) {
	c, err := client.New([]string{exampleAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.PutPolicy(ctx, client.Policy{Name: "watched", Limit: client.Limit{Algorithm: "fixed_window", Limit: 2, Window: "1h"},
		Notify: []float64{0.5, 1}}); err != nil {
		t.Fatal(err)
	}
	events := make(chan client.Event, 8)
	done := make(chan error, 1)
	stop := errors.New("seen enough")
	go func() {
		n := 0
		done <- c.WatchEvents(ctx, 0, func(ev client.Event) error {
			events <- ev
			if n++; n == 2 {
				return stop
			}
			return nil
		})
	}()
	// The watch is subscribed some time after it starts: a key checked
	// before crosses its threshold unwatched, so each attempt checks a new
	// key until an event comes, then checks that key again to cross 1.
	var got []client.Event
	var key string
	attempt := 0
	for len(got) < 2 {
		select {
		case ev := <-events:
			got = append(got, ev)
			if len(got) == 1 {
				var b struct{ Key string }
				_ = json.Unmarshal(ev.Data, &b)
				key = b.Key
				if _, err := c.Check(ctx, client.Request{Key: key, Policy: "watched"}); err != nil {
					t.Fatal(err)
				}
			}
		case <-time.After(50 * time.Millisecond):
			if len(got) == 0 {
				attempt++
				if _, err := c.Check(ctx, client.Request{Key: fmt.Sprintf("w%d", attempt), Policy: "watched"}); err != nil {
					t.Fatal(err)
				}
			}
		case <-ctx.Done():
			t.Fatalf("events so far: %+v", got)
		}
	}
	if err := <-done; !errors.Is(err, stop) {
		t.Fatalf("the watch ended with %v, want fn's error", err)
	}
	for i, ev := range got {
		var body struct {
			Key       string  `json:"key"`
			Policy    string  `json:"policy"`
			Threshold float64 `json:"threshold"`
		}
		if err := json.Unmarshal(ev.Data, &body); err != nil || ev.Type != "threshold" || ev.ID == 0 || body.Key != key || body.Policy != "watched" ||
			body.Threshold != []float64{0.5, 1}[i] {
			t.Fatalf("event %d: %+v (%v)", i, ev, err)
		}
	}
	if got[1].ID <= got[0].ID {
		t.Fatalf("ids out of order: %+v", got)
	}
	// From the first id: the second first, from the outbox.
	err = c.WatchEvents(ctx, got[0].ID, func(ev client.Event) error {
		if ev.ID != got[1].ID {
			t.Errorf("resumed with %d, want %d", ev.ID, got[1].ID)
		}
		return stop
	})
	if !errors.Is(err, stop) {
		t.Fatal(err)
	}
}
