package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The ceiling server must do the JSON work a real check does: decode the
// request (rejecting what is not a check) and encode a decision from it.
func TestCheckDecodesAndEncodes(t *testing.T) {
	srv := httptest.NewServer(newMux())
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/check", "application/json",
		strings.NewReader(`{"key":"k","limit":{"algorithm":"sliding_window","limit":100,"window":"1s"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var d decision
	err = json.NewDecoder(resp.Body).Decode(&d)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || !d.Allowed || d.Limit != 100 || d.Remaining != 99 {
		t.Fatalf("status %d decision %+v err %v", resp.StatusCode, d, err)
	}
	for _, body := range []string{`{"key":`, `{"key":"k"}`} {
		resp, err := http.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%s: status %d, want 400", body, resp.StatusCode)
		}
	}
	resp, err = http.Get(srv.URL + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz: %v %v", resp, err)
	}
	resp.Body.Close()
}
