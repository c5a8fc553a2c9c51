// Command client is a runnable example of the limitd Go client: it defines a
// policy, protects an HTTP handler with the middleware, and makes a few
// checks directly.
//
//	limitd --data-dir /tmp/limitd &
//	go run ./examples/client --addr 127.0.0.1:8080
//
// Against nodes serving HTTPS with a private CA (the README's cluster):
//
//	go run ./examples/client --addr https://127.0.0.1:8180 --tls-ca certs/ca.pem --token "$TOKEN"
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/limitd/limitd/client"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "comma-separated limitd nodes")
	token := flag.String("token", "", "admin token, if the cluster has one")
	ca := flag.String("tls-ca", "", "CA bundle that signed the nodes' certificates (turns on HTTPS; default for https:// addresses: the system roots)")
	flag.Parse()

	opts := []client.Option{client.WithToken(*token), client.WithFailMode(client.FailOpen)}
	if *ca != "" {
		pem, err := os.ReadFile(*ca)
		if err != nil {
			log.Fatalf("--tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			log.Fatalf("--tls-ca %s: no certificates found", *ca)
		}
		opts = append(opts, client.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}))
	}
	c, err := client.New([]string{*addr}, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	p, err := c.PutPolicy(ctx, client.Policy{Name: "example", Limit: client.Limit{Algorithm: "sliding_window", Limit: 3, Window: "60s"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("policy %s: %s %d per %s\n", p.Name, p.Algorithm, p.Limit.Limit, p.Window)

	key := fmt.Sprintf("user:%d", time.Now().UnixNano())
	for i := 0; i < 4; i++ {
		d, err := c.Check(ctx, client.Request{Key: key, Policy: "example"})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("check %d: allowed=%v remaining=%d retry_after=%s\n", i+1, d.Allowed, d.Remaining, d.RetryAfter)
	}

	// The middleware: 429 with Retry-After once the key is spent.
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	h := c.Middleware("example", func(r *http.Request) string { return r.Header.Get("X-Api-Key") })(app)
	for i := 0; i < 4; i++ {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-Api-Key", key+":web")
		h.ServeHTTP(rec, req)
		fmt.Printf("GET / %d RateLimit=%s Retry-After=%q\n", rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"))
	}
	st, err := c.Cluster(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("leader %s at %s, %d members; client sends to %s\n", st.LeaderID, st.LeaderHTTPAddr, len(st.Members), c.Target())
}
