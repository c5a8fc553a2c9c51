package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/limitd/limitd/client"
)

// A plan bundles limits; a key gets one by assignment, prefix rule or the
// default plan, and a check naming only the key is decided under it.
func ExampleClient_CheckPlan() {
	c, err := client.New([]string{exampleAddr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	for name, perMinute := range map[string]int64{"basic": 2, "gold": 100} {
		if _, err := c.PutPlan(ctx, client.Plan{Name: name, Limits: map[string]client.Limit{
			"per_minute": {Algorithm: "fixed_window", Limit: perMinute, Window: "1m"},
			"daily":      {Algorithm: "fixed_window", Limit: 1000, Calendar: "day"},
		}}); err != nil {
			log.Fatal(err)
		}
	}
	if err := c.PutPrefixRule(ctx, "org:", "basic"); err != nil {
		log.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		pc, err := c.CheckPlan(ctx, "org:acme", 1, "")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(pc.Plan, pc.PlanLimit, pc.Allowed, pc.Limits[0].Name, pc.Limits[0].Remaining)
	}
	// Moving the key to gold keeps what it spent in the limits both plans name.
	if err := c.AssignPlan(ctx, "org:acme", "gold"); err != nil {
		log.Fatal(err)
	}
	kp, _ := c.KeyPlan(ctx, "org:acme")
	pc, _ := c.CheckPlan(ctx, "org:acme", 1, "")
	fmt.Println(kp.Plan, kp.Source, pc.Allowed, pc.Limits[1].Name, pc.Limits[1].Remaining)

	if err := c.PutOverride(ctx, "org:acme", map[string]client.LimitOverride{"daily": {Limit: 5000}}, time.Now().Add(time.Hour)); err != nil {
		log.Fatal(err)
	}
	adj, err := c.Adjust(ctx, "org:acme", "daily", 2, "refund-1", "example")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(adj.Adjusted, adj.Remaining, adj.Overridden)

	_, err = c.AssignPlans(ctx, []client.Assignment{{Key: "a", Plan: "gold"}, {Key: "b", Plan: "platinum"}})
	var e *client.Error
	fmt.Println(errors.As(err, &e), e.Field)
	// Output:
	// basic per_minute true daily 999
	// basic per_minute true daily 998
	// basic per_minute false daily 998
	// gold assignment true per_minute 97
	// 2 4999 true
	// true lines[2].plan
}
