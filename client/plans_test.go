package client_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/limitd/limitd/client"
)

// TestPlanOptionsRoundTrip: a plan's notify and history options go to the
// server in their limits' objects and come back from GetPlan and ListPlans,
// so a get-modify-put keeps them (fails if the client drops either field in
// either direction).
func TestPlanOptionsRoundTrip(t *testing.T) {
	c, err := client.New([]string{exampleAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	want := client.Plan{Name: "options-round-trip", Limits: map[string]client.Limit{
		"per_second": {Algorithm: "token_bucket", Limit: 10, Window: "1s"},
		"daily":      {Algorithm: "fixed_window", Limit: 1000, Calendar: "day", Timezone: "UTC"},
	}, Options: map[string]client.PlanLimitOptions{
		"daily": {Notify: []float64{0.8, 1}, History: "400d"},
	}}
	put, err := c.PutPlan(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.GetPlan(ctx, want.Name)
	if err != nil {
		t.Fatal(err)
	}
	for what, p := range map[string]client.Plan{"PutPlan": put, "GetPlan": got} {
		if !reflect.DeepEqual(p.Options, want.Options) {
			t.Fatalf("%s: options %+v, want %+v", what, p.Options, want.Options)
		}
		if p.Limits["daily"].Calendar != "day" || p.Limits["per_second"].Limit != 10 {
			t.Fatalf("%s: limits %+v", what, p.Limits)
		}
	}
	plans, _, err := c.ListPlans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range plans {
		if p.Name == want.Name {
			found = reflect.DeepEqual(p.Options, want.Options)
		}
	}
	if !found {
		t.Fatalf("ListPlans: %q without its options: %+v", want.Name, plans)
	}

	// A put without the options turns them off.
	want.Options = nil
	if _, err := c.PutPlan(ctx, want); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetPlan(ctx, want.Name); err != nil || got.Options != nil {
		t.Fatalf("after a put without options: %+v, %v", got.Options, err)
	}
}

// TestPutPlanRefusesOptionsOfNoLimit: options naming a limit the plan lacks
// are refused before anything is sent, naming the field.
func TestPutPlanRefusesOptionsOfNoLimit(t *testing.T) {
	c, err := client.New([]string{exampleAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.PutPlan(context.Background(), client.Plan{Name: "orphan-options",
		Limits:  map[string]client.Limit{"daily": {Algorithm: "fixed_window", Limit: 10, Calendar: "day"}},
		Options: map[string]client.PlanLimitOptions{"hourly": {History: "30d"}}})
	var e *client.Error
	if !errors.As(err, &e) || e.Field != "options.hourly" {
		t.Fatalf("got %v, want invalid_argument on options.hourly", err)
	}
	if _, err := c.GetPlan(context.Background(), "orphan-options"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the refused plan exists: %v", err)
	}
}
