package service

import (
	"strings"
	"testing"

	"github.com/limitd/limitd/nodeapi"
)

// Every bad field of a work-in-flight read is refused naming it, before
// the node is asked.
func TestValidateInflightQueryNamesTheField(t *testing.T) {
	ok := nodeapi.InflightQuery{Key: "k", Policy: "p", Max: 10}
	if e := ValidateInflightQuery(ok); e != nil {
		t.Fatalf("a good query refused: %v", e)
	}
	for _, tc := range []struct {
		q     nodeapi.InflightQuery
		field string
	}{
		{nodeapi.InflightQuery{Policy: "p", Max: 1}, "key"},
		{nodeapi.InflightQuery{Key: strings.Repeat("k", MaxKeyBytes+1), Policy: "p", Max: 1}, "key"},
		{nodeapi.InflightQuery{Key: "k", Policy: "p", Limit: "daily", Max: 1}, "limit"},
		{nodeapi.InflightQuery{Key: "k", Policy: "bad name!", Max: 1}, "policy"},
		{nodeapi.InflightQuery{Key: "k", Policy: "p", Max: 0}, "max"},
		{nodeapi.InflightQuery{Key: "k", Policy: "p", Max: nodeapi.MaxInflightItems + 1}, "max"},
	} {
		e := ValidateInflightQuery(tc.q)
		if e == nil || e.Code != CodeInvalidArgument || e.Field != tc.field {
			t.Errorf("%+v: %v, want invalid_argument naming %s", tc.q, e, tc.field)
		}
	}
}
