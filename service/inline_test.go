package service

import (
	"context"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
)

// An inline limit that would keep a key longer than MaxInlineWindow is
// refused naming the field that makes it long (an anonymous client had kept
// each of its keys for 3,650 days); NoInlineLimits refuses every inline
// limit; policies are not affected.
func TestInlineLimitBounds(t *testing.T) {
	spec := func(c algo.Config) *algo.Spec {
		s, err := c.Spec()
		if err != nil {
			t.Fatal(err)
		}
		return &s
	}
	s := New(DepsOf(newNode("api")), Config{MaxInlineWindow: DefaultMaxInlineWindow})
	cases := []struct {
		c     algo.Config
		field string // "" allowed
	}{
		{algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "24h"}, ""},
		{algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "87600h"}, "limit.window"},
		{algo.Config{Algorithm: "sliding_window", Limit: 5, Window: "13h"}, "limit.window"},
		{algo.Config{Algorithm: "fixed_window", Limit: 5, Calendar: "day"}, ""},
		{algo.Config{Algorithm: "fixed_window", Limit: 5, Calendar: "month"}, "limit.calendar"},
		{algo.Config{Algorithm: "token_bucket", Limit: 1, Window: "1h", Burst: 100}, "limit.burst"},
		{algo.Config{Algorithm: "token_bucket", Limit: 100, Window: "1h", Burst: 100}, ""},
	}
	for _, c := range cases {
		_, e := s.Check(context.Background(), &CheckRequest{Key: "k", Limit: spec(c.c), Cost: 1})
		if c.field == "" {
			if e != nil {
				t.Errorf("%+v: %v, want allowed", c.c, e)
			}
			continue
		}
		wantErr(t, e, CodeInvalidArgument, c.field)
	}
	if _, e := s.Check(context.Background(), &CheckRequest{Key: "k", Policy: "api", Cost: 1}); e != nil {
		t.Fatalf("a policy check: %v", e)
	}
	off := New(DepsOf(newNode("api")), Config{NoInlineLimits: true, MaxInlineWindow: time.Hour})
	_, e := off.Check(context.Background(), &CheckRequest{Key: "k", Limit: spec(cases[0].c), Cost: 1})
	wantErr(t, e, CodeInvalidArgument, "limit")
	if _, e := off.Check(context.Background(), &CheckRequest{Key: "k", Policy: "api", Cost: 1}); e != nil {
		t.Fatalf("a policy check with inline limits off: %v", e)
	}
}
