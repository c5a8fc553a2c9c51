// Command barehttp is the ceiling for single checks over HTTP/1.1 JSON on a
// machine: it answers POST /v1/check by decoding the request and encoding a
// fixed decision — no Raft, no disk, no limiter. Drive it with the same load
// generator as limitd to see how much of limitd's cost is HTTP itself:
//
//	go run ./scripts/barehttp 127.0.0.1:19999 &
//	limitd bench --addrs http://127.0.0.1:19999 --duration 10s
package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
)

type checkRequest struct {
	Key   string `json:"key"`
	Cost  *int64 `json:"cost"`
	Limit *struct {
		Algorithm string `json:"algorithm"`
		Limit     int64  `json:"limit"`
		Window    string `json:"window"`
	} `json:"limit"`
}

type decision struct {
	Allowed      bool  `json:"allowed"`
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	ResetAfterMs int64 `json:"reset_after_ms"`
	RetryAfterMs int64 `json:"retry_after_ms"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: barehttp HOST:PORT")
		os.Exit(2)
	}
	if err := http.ListenAndServe(os.Args[1], newMux()); err != nil {
		fmt.Fprintln(os.Stderr, "barehttp:", err)
		os.Exit(1)
	}
}

func newMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ready":true}`)
	})
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		var req checkRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Limit == nil {
			http.Error(w, `{"error":{"code":"invalid_argument"}}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(decision{Allowed: true, Limit: req.Limit.Limit, Remaining: req.Limit.Limit - 1, ResetAfterMs: 1000})
	})
	return mux
}
