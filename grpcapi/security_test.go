package grpcapi

import (
	"testing"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// publicMethods are the limitd.v1 methods open without the admin token, as
// their HTTP counterparts are (checks, peeks, reads).
var publicMethods = map[string]bool{
	"Check": true, "CheckAll": true, "Batch": true, "Peek": true, "Release": true, "Renew": true,
	"Settle": true, "Refund": true, // like their HTTP routes: a caller settles or refunds what its own checks spent
	"ReleaseBatch": true, "RenewBatch": true, "SettleBatch": true, // as their single methods (costbatch.go)
	"GetPolicy": true, "ListPolicies": true, "GetRLSDomain": true, "ListRLSDomains": true,
	"GetPlan": true, "ListPlans": true, "GetKeyPlan": true, "ListPrefixRules": true,
	"GetClusterSlots": true, // as GET /v1/cluster/slots: node ids and HTTP addresses, as /v1/cluster's public view
}

// Every limitd.v1 method is classified: admin (token, as over HTTP) or
// public. A method added to the proto without a decision fails here instead
// of being open by default.
func TestEveryMethodClassified(t *testing.T) {
	desc := limitdv1.Limitd_ServiceDesc
	seen := map[string]bool{}
	for _, m := range desc.Streams { // authenticateStream applies the same table
		full := "/" + desc.ServiceName + "/" + m.StreamName
		seen[full] = true
		if adminMethods[full] == publicMethods[m.StreamName] {
			t.Errorf("%s: admin=%v public=%v; classify it in adminMethods or publicMethods", full, adminMethods[full], publicMethods[m.StreamName])
		}
	}
	for _, m := range desc.Methods {
		full := "/" + desc.ServiceName + "/" + m.MethodName
		seen[full] = true
		if adminMethods[full] == publicMethods[m.MethodName] {
			t.Errorf("%s: admin=%v public=%v; classify it in adminMethods or publicMethods", full, adminMethods[full], publicMethods[m.MethodName])
		}
	}
	for m := range adminMethods {
		if !seen[m] {
			t.Errorf("adminMethods lists %s, which limitd.v1 does not have (a typo leaves the real method open)", m)
		}
	}
}
