package bench

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestReadResponse(t *testing.T) {
	cases := []struct {
		name   string
		in     string
		status int
		keep   bool
		body   string
	}{
		{"content length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 200, true, "hello"},
		{"bare LF and odd case", "HTTP/1.1 404 Not Found\nCONTENT-length:  3 \n\nabc", 404, true, "abc"},
		{"no reason phrase", "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok", 200, true, "ok"},
		{"chunked with extension and trailer",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\n",
			200, true, "hello, world"},
		{"connection close", "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno", 503, false, "no"},
		{"HTTP/1.0 closes", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, false, "ok"},
		{"until EOF", "HTTP/1.1 200 OK\r\n\r\nall of it", 200, false, "all of it"},
		{"100 Continue first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", 200, true, "x"},
		{"204 has no body", "HTTP/1.1 204 No Content\r\n\r\n", 204, true, ""},
		{"equal duplicate lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", 200, true, "x"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, keep, body, err := readResponse(bufio.NewReader(strings.NewReader(c.in)), []byte("old"))
			if err != nil {
				t.Fatal(err)
			}
			if status != c.status || keep != c.keep || string(body) != "old"+c.body {
				t.Errorf("got %d keep=%v %q, want %d keep=%v %q", status, keep, body, c.status, c.keep, "old"+c.body)
			}
		})
	}
}

func TestReadResponseRefuses(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want error // nil: any ErrMalformed
	}{
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", nil},
		{"short status", "HTTP/1.1 20\r\n\r\n", nil},
		{"status not a number", "HTTP/1.1 2x0 OK\r\n\r\n", nil},
		{"HTTP/2 status line", "HTTP/2 200\r\n\r\n", nil},
		{"header without colon", "HTTP/1.1 200 OK\r\nnocolon\r\n\r\n", nil},
		{"negative length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", nil},
		{"signed length", "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx", nil},
		{"length of 19 digits", "HTTP/1.1 200 OK\r\nContent-Length: 1000000000000000000\r\n\r\n", nil},
		{"empty length", "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n", nil},
		{"conflicting lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx", nil},
		{"unknown transfer coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", nil},
		{"bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", nil},
		{"no CRLF after chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n0\r\n\r\n", nil},
		{"empty", "", io.EOF},
		{"cut in the header", "HTTP/1.1 200 OK\r\nContent-Le", io.ErrUnexpectedEOF},
		{"cut in the body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", io.ErrUnexpectedEOF},
		{"cut in a chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", io.ErrUnexpectedEOF},
		{"no last chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n", io.ErrUnexpectedEOF},
		{"body over the bound", "HTTP/1.1 200 OK\r\nContent-Length: 16777217\r\n\r\n", errResponseTooLarge},
		{"chunk over the bound", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000001\r\n", errResponseTooLarge},
		{"header over the bound", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("p", 1000)+"\r\n", 70) + "\r\n", errResponseTooLarge},
		{"line over the buffer", "HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("p", 5000) + "\r\n\r\n", errResponseTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, _, err := readResponse(bufio.NewReaderSize(strings.NewReader(c.in), 4096), nil)
			want := c.want
			if want == nil {
				want = ErrMalformed
			}
			if !errors.Is(err, want) {
				t.Errorf("error %v, want %v", err, want)
			}
		})
	}
}

// connCountingServer serves h and counts the connections its requests came
// on (by remote address).
func connCountingServer(h http.HandlerFunc) (*httptest.Server, func() int) {
	var mu sync.Mutex
	remotes := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes[r.RemoteAddr] = true
		mu.Unlock()
		h(w, r)
	}))
	return srv, func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(remotes)
	}
}

// TestOwnClientKeepsAlive: sequential requests share one connection, and a
// base URL's path prefixes the request path.
func TestOwnClientKeepsAlive(t *testing.T) {
	srv, conns := connCountingServer(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/prefix/v1/check" || r.Header.Get("Content-Type") != "application/json" || r.ContentLength != int64(len(b)) {
			http.Error(w, "bad request shape "+r.URL.Path, 400)
			return
		}
		w.Write(b) // echo
	})
	defer srv.Close()
	c, err := newConnClient([]string{srv.URL + "/prefix/"}, 4, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.closeIdle()
	for i := range 20 {
		body := strings.Repeat("x", i)
		status, got, err := c.post(context.Background(), 0, "/v1/check", []byte(body), nil)
		if err != nil || status != 200 || string(got) != body {
			t.Fatalf("request %d: %d %q %v", i, status, got, err)
		}
	}
	if n := conns(); n != 1 {
		t.Errorf("20 sequential requests used %d connections, want 1", n)
	}
}

// TestOwnClientClosesOnConnectionClose: a response with Connection: close
// is answered, and the next request dials again.
func TestOwnClientClosesOnConnectionClose(t *testing.T) {
	srv, conns := connCountingServer(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.Write([]byte("bye"))
	})
	defer srv.Close()
	c, err := newConnClient([]string{srv.URL}, 4, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.closeIdle()
	for i := range 3 {
		if status, got, err := c.post(context.Background(), 0, "/v1/check", []byte("{}"), nil); err != nil || status != 200 || string(got) != "bye" {
			t.Fatalf("request %d: %d %q %v", i, status, got, err)
		}
	}
	if n := conns(); n != 3 {
		t.Errorf("3 requests answered with Connection: close used %d connections, want 3", n)
	}
	if n := len(c.hosts[0].idle); n != 0 {
		t.Errorf("%d closed connections kept idle", n)
	}
}

// TestOwnClientContextEnds: a request whose context is cancelled returns at
// once with the context's error, and its connection is not reused.
func TestOwnClientContextEnds(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c, err := newConnClient([]string{srv.URL}, 4, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.closeIdle()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := c.post(ctx, 0, "/v1/check", []byte("{}"), nil)
		done <- err
	}()
	<-entered // the request is in flight: its connection is dialled and written
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second): // a hang, not a timing assertion
		t.Fatal("post did not return after its context was cancelled")
	}
	if n := len(c.hosts[0].idle); n != 0 {
		t.Errorf("%d connections kept after a cancelled request", n)
	}
}

// TestOwnClientTimeout: a server that never answers costs one timeout, seen
// by Classify as one.
func TestOwnClientTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close() // read nothing, answer nothing
		}
	}()
	c, err := newConnClient([]string{"http://" + ln.Addr().String()}, 1, 50*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.post(context.Background(), 0, "/v1/check", []byte("{}"), nil)
	if Classify(err) != ErrTimeout {
		t.Errorf("error %v classified %v, want a timeout", err, Classify(err))
	}
}

// TestOwnClientTLS: an https base URL is reached over TLS, verifying the
// server's certificate.
func TestOwnClientTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("secure"))
	}))
	defer srv.Close()
	c, err := newConnClient([]string{srv.URL}, 1, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.post(context.Background(), 0, "/v1/check", []byte("{}"), nil); err == nil {
		t.Fatal("an unknown certificate was accepted")
	}
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c.hosts[0].tls.RootCAs = pool
	c.hosts[0].tls.ServerName = "example.com" // httptest's certificate names it
	status, got, err := c.post(context.Background(), 0, "/v1/check", []byte("{}"), nil)
	if err != nil || status != 200 || string(got) != "secure" {
		t.Fatalf("%d %q %v", status, got, err)
	}
}

func TestNewConnClientRefuses(t *testing.T) {
	for _, a := range []string{"127.0.0.1:80", "ftp://h/", "http://user@h/", "http://h/?q=1", "http://h/#f", "://x"} {
		if _, err := newConnClient([]string{a}, 1, time.Second, nil); err == nil {
			t.Errorf("address %q accepted", a)
		}
	}
	c, err := newConnClient([]string{"http://h", "https://[::1]/p/"}, 1, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h := c.hosts[0]; h.addr != "h:80" || h.host != "h" || h.prefix != "" || h.tls != nil {
		t.Errorf("http://h: %+v", h)
	}
	if h := c.hosts[1]; h.addr != "[::1]:443" || h.host != "[::1]" || h.prefix != "/p" || h.tls == nil {
		t.Errorf("https://[::1]/p/: %+v", h)
	}
}
