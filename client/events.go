package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Event is one alert event of GET /v1/events (docs/API.md, "Alerts"): its
// id (its place in the outbox, the same on every node), its type
// ("threshold" or "ban") and its body, the JSON object webhooks receive.
type Event struct {
	ID   uint64
	Type string
	Data json.RawMessage
}

// maxEventLine bounds one line of the stream: an event body is one line of
// JSON far below it.
const maxEventLine = 1 << 20

// WatchEvents streams the alert events the node applies (admin) to fn, in
// order, until ctx ends (nil), fn returns an error (that error) or the
// stream breaks (an error: call again with the last ID seen). With afterID
// the node first sends the events after it still in its outbox. Any node
// answers; the stream has no deadline of its own, so bound it with ctx.
func (c *Client) WatchEvents(ctx context.Context, afterID uint64, fn func(Event) error) error {
	last := afterID
	streaming := false
	var fnErr error
	err := c.retry(ctx, true, func(ctx context.Context, host string) error {
		if streaming {
			return fmt.Errorf("limitd: event stream from %s broke after event %d; watch again from it", host, last)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.scheme+"://"+host+"/v1/events", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept", "text/event-stream")
		if c.opts.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.opts.token)
		}
		if last > 0 {
			req.Header.Set("Last-Event-ID", strconv.FormatUint(last, 10))
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			if kind := configKind(err); kind != "" {
				return &ConfigError{Addr: host, Kind: kind, Err: unwrapURL(err)}
			}
			return &transportError{addr: host, sent: sentMaybe(err), err: err}
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			return decodeError(resp, b)
		}
		streaming = true
		return readEvents(resp.Body, func(ev Event) error {
			last = ev.ID
			fnErr = fn(ev)
			return fnErr
		})
	})
	switch {
	case fnErr != nil:
		return fnErr
	case ctx.Err() != nil:
		return nil
	}
	return err
}

// readEvents parses server-sent events (id, event, data lines; a blank line
// ends one; comment lines are keep-alives) and hands each to fn.
func readEvents(r io.Reader, fn func(Event) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxEventLine)
	var ev Event
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.Data != nil {
				if err := fn(ev); err != nil {
					return err
				}
			}
			ev = Event{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			id, err := strconv.ParseUint(line[4:], 10, 64)
			if err != nil {
				return fmt.Errorf("limitd: event stream: bad id %q", line[4:])
			}
			ev.ID = id
		case strings.HasPrefix(line, "event: "):
			ev.Type = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.Data = json.RawMessage(line[6:])
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("limitd: event stream: %w", err)
	}
	return fmt.Errorf("limitd: event stream ended")
}
