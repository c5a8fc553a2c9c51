package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/limitd/limitd/internal/proccluster"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// The gRPC port holds the HTTP port's bounds (no softer door to the same node):
// a client opening thousands of calls that never send their message on a
// few connections, and hundreds of connections that never handshake, pins
// neither memory nor file descriptors beyond the caps, and checks are still
// answered over gRPC and HTTP meanwhile. Loopback, a bounded count of
// streams and connections; no timing assertion beyond "eventually".
func TestProcessGRPCFloodBounded(t *testing.T) {
	const (
		maxConns    = 16
		maxStreams  = 8
		floodConns  = 4    // HTTP/2 connections opening streams
		perConn     = 2000 // HEADERS without DATA on each
		idleFlood   = 200  // TCP connections that never send a byte
		rssGrowthMB = 100  // without the stream cap, 8,000 open calls take ~80 MB more
	)
	p := newProc(t, "gflood", "")
	p.GRPCAddr = freePort(t)
	p.start("--grpc-max-connections", fmt.Sprint(maxConns), "--grpc-max-streams", fmt.Sprint(maxStreams), "--read-timeout", "1s")
	p.waitReady()
	pid := p.PID()
	fdsBefore, rssBefore := countFDs(t, pid), proccluster.ProcessRSS(pid)

	// A client connected before the flood keeps being answered.
	creds := insecure.NewCredentials()
	if proccluster.TLSFromEnv {
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})
	}
	gc, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	client := limitdv1.NewLimitdClient(gc)
	check := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		lim := &limitdv1.Limit{Algorithm: "fixed_window", Limit: 1 << 30, Window: "1h"}
		if _, err := client.Check(ctx, &limitdv1.CheckRequest{Key: "flood", Limit: lim}); err != nil {
			t.Fatalf("gRPC check %s: %v", what, err)
		}
		p.check(`{"key":"flood-http","limit":{"algorithm":"fixed_window","limit":1000000,"window":"1h"}}`)
	}
	check("before the flood")

	// Stream flood: each connection sends HEADERS for perConn calls and no
	// DATA. The server advertises its cap and refuses every stream past it.
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for i := 0; i < floodConns; i++ {
		c := dialGRPCRaw(t, p.GRPCAddr)
		flood = append(flood, c)
		advertised, refused := floodStreams(t, c, perConn)
		if advertised != maxStreams {
			t.Errorf("connection %d: the server advertised MAX_CONCURRENT_STREAMS %d, want %d", i, advertised, maxStreams)
		}
		if refused < perConn-maxStreams {
			t.Errorf("connection %d: %d of %d streams refused, want at least %d", i, refused, perConn, perConn-maxStreams)
		}
	}
	check("during the stream flood")

	// Connection flood: more idle TCP connections than the cap. At most
	// maxConns are accepted (the rest wait in the kernel's backlog), and
	// each accepted one is cut off after --read-timeout without a handshake.
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for i := 0; i < idleFlood; i++ {
		c, err := net.DialTimeout("tcp", p.GRPCAddr, 5*time.Second)
		if err != nil {
			break // a full backlog: the flood is as large as it gets
		}
		idle = append(idle, c)
	}
	fds, rss := countFDs(t, pid), proccluster.ProcessRSS(pid)
	t.Logf("file descriptors %d → %d, RSS %d → %d MB with %d streams sent on %d connections and %d idle connections",
		fdsBefore, fds, rssBefore>>20, rss>>20, floodConns*perConn, floodConns, len(idle))
	if fds > fdsBefore+maxConns+8 {
		t.Errorf("the process holds %d file descriptors, %d before the flood: the gRPC connection cap of %d does not hold", fds, fdsBefore, maxConns)
	}
	if rss-rssBefore > rssGrowthMB<<20 {
		t.Errorf("RSS grew by %d MB under the flood (bound %d MB)", (rss-rssBefore)>>20, rssGrowthMB)
	}
	check("during the connection flood")

	// The server cuts off idle connections that never handshake.
	deadline := time.Now().Add(60 * time.Second)
	for _, c := range idle[:min(len(idle), maxConns)] {
		c.SetReadDeadline(deadline)
		// The server's SETTINGS may come first; then the end of the stream.
		if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("an idle connection was not closed by the server within a minute: %v", err)
		}
	}
}

// countFDs is the number of open file descriptors of process pid.
func countFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("count file descriptors: %v", err)
	}
	return len(ents)
}

// dialGRPCRaw opens a connection speaking HTTP/2 to a gRPC server (TLS
// when the process suite runs with certificates).
func dialGRPCRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if proccluster.TLSFromEnv {
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		c = tc
	}
	return c
}

// floodStreams sends the client preface and n HEADERS frames opening
// limitd.v1 Check calls without DATA, then reads the server's frames until
// it has the answer to every stream or nothing more comes. It returns the
// server's MAX_CONCURRENT_STREAMS and how many streams it refused.
func floodStreams(t *testing.T, c net.Conn, n int) (advertised uint32, refused int) {
	t.Helper()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, h := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/limitd.v1.Limitd/Check"},
		{":authority", "limitd"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
	}
	block := hb.Bytes()
	// Write from another goroutine: the server's answers must be read
	// meanwhile, or both sides block on full buffers.
	werr := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block, EndHeaders: true}); err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	for refused < n-int(advertised) || advertised == 0 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's frames (%d refused so far): %v", refused, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				break
			}
			v, ok := f.Value(http2.SettingMaxConcurrentStreams)
			if !ok {
				return 0, 0 // no cap: nothing will be refused
			}
			advertised = v
		case *http2.RSTStreamFrame:
			if f.ErrCode == http2.ErrCodeRefusedStream {
				refused++
			}
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY after %d refused streams: %v", refused, f.ErrCode)
		}
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	return advertised, refused
}
