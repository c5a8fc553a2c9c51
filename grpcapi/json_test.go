package grpcapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// TestJSONEndpoint: envoy ratelimit's POST /json: proto3-JSON request, 200
// while allowed, 429 when over the limit, the RateLimitResponse as body;
// errors in the HTTP API's shape.
func TestJSONEndpoint(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	if _, err := c.putDomain(ctxT(t), 0, &limitdv1.PutRLSDomainRequest{
		Config: "domain: j\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.servers[0].JSONHandler())
	defer srv.Close()
	post := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	req := `{"domain":"j","descriptors":[{"entries":[{"key":"user","value":"u1"}]}],"hitsAddend":1}`
	for i, want := range []int{200, 200, 429} {
		code, body := post(req)
		if code != want {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
		var r rlspb.RateLimitResponse
		if err := protojson.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("request %d: body %q: %v", i, body, err)
		}
		if want == 429 && r.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 2 {
			t.Fatalf("request %d: %v", i, &r)
		}
	}
	code, body := post(`{"domain":"j"}`)
	var e struct {
		Error struct{ Code, Field string } `json:"error"`
	}
	if json.Unmarshal([]byte(body), &e); code != 400 || e.Error.Code != "invalid_argument" || e.Error.Field != "descriptors" {
		t.Fatalf("no descriptors: %d %s", code, body)
	}
	if code, body := post(`{"domain":"j","nope":1}`); code != 400 || !strings.Contains(body, "invalid_argument") {
		t.Fatalf("unknown field: %d %s", code, body)
	}
	resp, err := http.Get(srv.URL + "/json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Fatalf("GET /json: %d", resp.StatusCode)
	}
}
