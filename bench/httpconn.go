package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The bench's own HTTP/1.1 client, for the one request shape a load generator
// sends: a POST of a JSON body to a fixed path, answered with a short body.
//
// Why not net/http's client: its transport passes every request through two
// goroutines of the connection's (a writer and a reader) besides the caller,
// so each check costs the generator three goroutine hand-offs and their
// wake-ups. On a box where the generator shares two CPUs with the servers it
// measures, that is CPU taken from the servers: in the closed loop net/http's
// client spent 114 µs per check where redisbench's Redis client (go-redis,
// which writes and reads on the caller's goroutine) spent 38.5. Here the caller
// writes the request and reads the answer itself on a kept-alive connection:
// one write, one read, one park. --net-http keeps net/http's client.

// Bounds on what a server may send back: a check's answer is a few hundred
// bytes and a batch's a few hundred per check.
const (
	maxResponseHeaderBytes = 64 << 10
	maxResponseBodyBytes   = 16 << 20
)

// errResponseTooLarge: a status line, header or body over its bound.
var errResponseTooLarge = errors.New("response too large")

// connClient sends requests to a set of base URLs, each with its own pool of
// kept-alive connections.
type connClient struct {
	timeout time.Duration
	dialer  net.Dialer
	hosts   []*connHost
}

// connHost is one base URL: where to dial, what to send as Host, its path
// prefix, and its idle connections.
type connHost struct {
	addr   string      // host:port to dial
	host   string      // the Host header
	prefix string      // the base URL's path, without a trailing slash
	tls    *tls.Config // nil: plain http
	max    int         // idle connections kept

	mu   sync.Mutex
	idle []*hconn
}

// hconn is one connection, its reader, and the buffer requests are written
// from.
type hconn struct {
	c net.Conn
	r *bufio.Reader
	w []byte
}

// newConnClient parses the base URLs (http or https, with an optional path
// prefix) and keeps up to idlePerHost connections to each.
func newConnClient(bases []string, idlePerHost int, timeout time.Duration, tlsCfg *tls.Config) (*connClient, error) {
	c := &connClient{timeout: timeout, dialer: net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}}
	for _, b := range bases {
		u, err := url.Parse(b)
		if err != nil {
			return nil, fmt.Errorf("address %q: %w", b, err)
		}
		if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("address %q: want scheme://host[:port][/path]", b)
		}
		h := &connHost{host: u.Host, prefix: strings.TrimRight(u.EscapedPath(), "/"), max: max(idlePerHost, 1)}
		port := u.Port()
		switch u.Scheme {
		case "http":
			if port == "" {
				port = "80"
			}
		case "https":
			if port == "" {
				port = "443"
			}
			h.tls = &tls.Config{MinVersion: tls.VersionTLS12}
			if tlsCfg != nil {
				h.tls = tlsCfg.Clone()
			}
			h.tls.ServerName = u.Hostname()
		default:
			return nil, fmt.Errorf("address %q: scheme %q, want http or https", b, u.Scheme)
		}
		h.addr = net.JoinHostPort(u.Hostname(), port)
		c.hosts = append(c.hosts, h)
	}
	return c, nil
}

// post sends body to path on host i and reads the answer into dst. It
// returns the status and the body (dst's storage when it fits). A request
// that fails leaves no connection behind; one whose context ends is
// abandoned at once (its connection closed).
func (c *connClient) post(ctx context.Context, i int, path string, body, dst []byte) (int, []byte, error) {
	h := c.hosts[i]
	hc, reused, err := h.get(ctx, &c.dialer)
	if err != nil {
		return 0, nil, err
	}
	if err := hc.c.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		hc.c.Close()
		return 0, nil, err
	}
	// The context's end (its deadline too) ends the request at once.
	stop := context.AfterFunc(ctx, func() { hc.c.SetDeadline(time.Unix(1, 0)) })

	hc.w = append(hc.w[:0], "POST "...)
	hc.w = append(hc.w, h.prefix...)
	hc.w = append(hc.w, path...)
	hc.w = append(hc.w, " HTTP/1.1\r\nHost: "...)
	hc.w = append(hc.w, h.host...)
	hc.w = append(hc.w, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	hc.w = strconv.AppendInt(hc.w, int64(len(body)), 10)
	hc.w = append(hc.w, "\r\n\r\n"...)
	hc.w = append(hc.w, body...)
	_, err = hc.c.Write(hc.w)
	var status int
	keep := false
	if err == nil {
		status, keep, dst, err = readResponse(hc.r, dst[:0])
	}
	if !stop() { // the context ended: the deadline may now be in the past
		keep = false
		if err != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
	}
	if err != nil {
		hc.c.Close()
		if reused && errors.Is(err, io.EOF) {
			err = fmt.Errorf("kept-alive connection to %s closed: %w", h.addr, err)
		}
		return 0, nil, fmt.Errorf("post %s%s to %s: %w", h.prefix, path, h.addr, err)
	}
	if keep {
		h.put(hc)
	} else {
		hc.c.Close()
	}
	return status, dst, nil
}

// get returns an idle connection, or dials one.
func (h *connHost) get(ctx context.Context, d *net.Dialer) (*hconn, bool, error) {
	h.mu.Lock()
	if n := len(h.idle); n > 0 {
		hc := h.idle[n-1]
		h.idle = h.idle[:n-1]
		h.mu.Unlock()
		return hc, true, nil
	}
	h.mu.Unlock()
	c, err := d.DialContext(ctx, "tcp", h.addr)
	if err != nil {
		return nil, false, err
	}
	if h.tls != nil {
		tc := tls.Client(c, h.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, false, fmt.Errorf("tls handshake with %s: %w", h.addr, err)
		}
		c = tc
	}
	return &hconn{c: c, r: bufio.NewReaderSize(c, 4096), w: make([]byte, 0, 512)}, false, nil
}

// put keeps hc for the next request, or closes it when enough are idle.
func (h *connHost) put(hc *hconn) {
	h.mu.Lock()
	if len(h.idle) < h.max {
		h.idle = append(h.idle, hc)
		hc = nil
	}
	h.mu.Unlock()
	if hc != nil {
		hc.c.Close()
	}
}

// closeIdle closes every idle connection.
func (c *connClient) closeIdle() {
	for _, h := range c.hosts {
		h.mu.Lock()
		idle := h.idle
		h.idle = nil
		h.mu.Unlock()
		for _, hc := range idle {
			hc.c.Close()
		}
	}
}

// readResponse reads one HTTP/1.x response to a POST: the status, whether
// the connection may be reused, and the body appended to dst (Content-Length,
// chunked, or until the connection closes). 1xx responses are skipped.
func readResponse(r *bufio.Reader, dst []byte) (status int, keep bool, body []byte, err error) {
	hl := lineReader{r: r, max: maxResponseHeaderBytes, what: "header"}
	for {
		l, err := hl.line()
		if err != nil {
			return 0, false, nil, err
		}
		// "HTTP/1.1 200 OK": the version, a space, three digits.
		if len(l) < 12 || !bytes.HasPrefix(l, []byte("HTTP/1.")) || l[8] != ' ' || (len(l) > 12 && l[12] != ' ') {
			return 0, false, nil, malformed("status line %q", l)
		}
		code, ok := parseDecimal(l[9:12])
		if !ok || code < 100 {
			return 0, false, nil, malformed("status line %q", l)
		}
		status = int(code)
		keep = l[7] == '1' // HTTP/1.0 closes unless told otherwise; we never ask
		length, chunked := int64(-1), false
		for {
			h, err := hl.line()
			if err != nil {
				return 0, false, nil, err
			}
			if len(h) == 0 {
				break
			}
			name, value, ok := bytes.Cut(h, []byte(":"))
			if !ok {
				return 0, false, nil, malformed("header line %q", h)
			}
			value = bytes.TrimSpace(value)
			switch {
			case asciiEqualFold(name, "content-length"):
				n, ok := parseDecimal(value)
				if !ok || (length >= 0 && n != length) {
					return 0, false, nil, malformed("Content-Length %q", value)
				}
				length = n
			case asciiEqualFold(name, "transfer-encoding"):
				if !asciiEqualFold(value, "chunked") {
					return 0, false, nil, malformed("Transfer-Encoding %q", value)
				}
				chunked = true
			case asciiEqualFold(name, "connection"):
				if asciiEqualFold(value, "close") {
					keep = false
				}
			}
		}
		if status < 200 {
			continue // 100 Continue and the like: the answer follows
		}
		switch {
		case status == 204 || status == 304:
			return status, keep, dst, nil
		case chunked:
			dst, err = readChunked(r, dst)
			return status, keep, dst, err
		case length >= 0:
			if length > maxResponseBodyBytes {
				return 0, false, nil, fmt.Errorf("%w: body of %d bytes", errResponseTooLarge, length)
			}
			n := len(dst)
			dst = append(dst, make([]byte, length)...)
			if _, err := io.ReadFull(r, dst[n:]); err != nil {
				return 0, false, nil, fmt.Errorf("body: %w", noEOF(err))
			}
			return status, keep, dst, nil
		default: // the body runs until the server closes
			b, err := io.ReadAll(io.LimitReader(r, maxResponseBodyBytes+1))
			if err != nil {
				return 0, false, nil, fmt.Errorf("body: %w", err)
			}
			if len(b) > maxResponseBodyBytes {
				return 0, false, nil, fmt.Errorf("%w: body over %d bytes", errResponseTooLarge, maxResponseBodyBytes)
			}
			return status, false, append(dst, b...), nil
		}
	}
}

// readChunked reads a chunked body and its trailer.
func readChunked(r *bufio.Reader, dst []byte) ([]byte, error) {
	// Chunk-size lines and the trailer are bounded like a header; the data by
	// maxResponseBodyBytes.
	cl := lineReader{r: r, max: maxResponseHeaderBytes, what: "chunk framing"}
	start := len(dst)
	for {
		l, err := cl.line()
		if err != nil {
			return nil, fmt.Errorf("chunk size: %w", noEOF(err))
		}
		if i := bytes.IndexByte(l, ';'); i >= 0 {
			l = l[:i] // chunk extensions
		}
		size, err := strconv.ParseUint(string(bytes.TrimSpace(l)), 16, 63)
		if err != nil {
			return nil, malformed("chunk size %q", l)
		}
		if size == 0 {
			break
		}
		if uint64(len(dst)-start)+size > maxResponseBodyBytes {
			return nil, fmt.Errorf("%w: body over %d bytes", errResponseTooLarge, maxResponseBodyBytes)
		}
		n := len(dst)
		dst = append(dst, make([]byte, size)...)
		if _, err := io.ReadFull(r, dst[n:]); err != nil {
			return nil, fmt.Errorf("chunk: %w", noEOF(err))
		}
		if crlf, err := cl.line(); err != nil || len(crlf) != 0 {
			return nil, malformed("no CRLF after a chunk")
		}
	}
	for { // the trailer, up to its empty line
		l, err := cl.line()
		if err != nil {
			return nil, fmt.Errorf("trailer: %w", noEOF(err))
		}
		if len(l) == 0 {
			return dst, nil
		}
	}
}

// lineReader reads CRLF- (or LF-) terminated lines, at most max bytes in all.
type lineReader struct {
	r    *bufio.Reader
	n    int
	max  int
	what string
}

// line returns the next line without its terminator; it is valid until the
// next read from r.
func (lr *lineReader) line() ([]byte, error) {
	l, err := lr.r.ReadSlice('\n')
	lr.n += len(l)
	if errors.Is(err, bufio.ErrBufferFull) || lr.n > lr.max {
		return nil, fmt.Errorf("%w: %s over %d bytes", errResponseTooLarge, lr.what, lr.max)
	}
	if err != nil {
		if err == io.EOF && lr.n > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return bytes.TrimRight(l, "\r\n"), nil
}

// parseDecimal reads 1 to 18 decimal digits, nothing else: Content-Length
// and a status code are digits only (strconv would also take a sign).
func parseDecimal(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// noEOF: a body cut short is an unexpected EOF, not the end of a stream.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// asciiEqualFold reports whether b equals the lower-case ASCII s, ignoring
// case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
