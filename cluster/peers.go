package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// peerClient is how a node asks other nodes, over their HTTP endpoints,
// who they are and to let it join: the discovery and join requests of a
// starting node and the leader's questions to a joiner. It needs only the
// HTTP client and credentials, not the node.
type peerClient struct {
	client  *http.Client
	scheme  string        // http or https
	token   string        // admin token sent as a bearer token ("" none)
	timeout time.Duration // a join's bound (ApplyTimeout)
	closing <-chan struct{}
	// group is the Raft group the requests are about: a process hosting
	// several groups serves them all on one HTTP port and routes
	// /internal/ requests by X-Limitd-Group, so the leader asking a joiner
	// of group g for its incarnation (admit.go) reads group g's, not group 0's.
	group uint32
}

// setGroup names p's group on req (none for group 0, as earlier builds send).
func (p peerClient) setGroup(req *http.Request) {
	if p.group != 0 {
		req.Header.Set("X-Limitd-Group", strconv.FormatUint(uint64(p.group), 10))
	}
}

// resolveJoin turns the join list into base URLs, expanding host names to
// every address they resolve to. A name that does not resolve (yet: a pod
// not scheduled) is skipped this round.
func (p peerClient) resolveJoin(ctx context.Context, addrs []string) ([]string, error) {
	var out []string
	var errs []error
	for _, a := range addrs {
		u, err := joinURL(a, p.scheme)
		if err != nil {
			return nil, &permanentError{err}
		}
		host, port := u.Hostname(), u.Port()
		if net.ParseIP(host) != nil || port == "" {
			out = append(out, u.String())
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ips, err := net.DefaultResolver.LookupHost(rctx, host)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("resolve %s: %w", host, err))
			continue
		}
		sort.Strings(ips)
		for _, ip := range ips {
			v := *u
			v.Host = net.JoinHostPort(ip, port)
			out = append(out, v.String())
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > maxJoinAddrs {
		out = out[:maxJoinAddrs]
	}
	return out, errors.Join(errs...)
}

// joinAny asks each target in turn to add this node (b: its join request);
// nil on the first success.
func (p peerClient) joinAny(ctx context.Context, targets []string, b []byte) error {
	var errs []error
	for _, t := range targets {
		err := p.joinOne(ctx, t+"/v1/cluster/join", b)
		if err == nil {
			return nil
		}
		var perm *permanentError
		if errors.As(err, &perm) || ctx.Err() != nil {
			return err
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (p peerClient) joinOne(ctx context.Context, url string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 2*p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return &permanentError{fmt.Errorf("join %s: %w", url, err)}
	}
	req.Header.Set("Content-Type", "application/json")
	p.setGroup(req)
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("join %s: %w", url, err)
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	err = fmt.Errorf("join %s: %s: %s", url, resp.Status, strings.TrimSpace(string(data)))
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusBadRequest {
		return &permanentError{err}
	}
	return err
}

// getJSON GETs a node-to-node endpoint into v.
func (p peerClient) getJSON(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	p.setGroup(req)
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(v)
}

// info asks a member who it is.
func (p peerClient) info(ctx context.Context, httpAddr string) (bootstrapInfo, error) {
	var info bootstrapInfo
	u, err := joinURL(httpAddr, p.scheme)
	if err != nil {
		return info, err
	}
	err = p.getJSON(ctx, u.String()+pathBootstrap, &info)
	return info, err
}

// infoRetry is info for a join: a lost request or answer is asked
// again (nothing is proposed before it succeeds) for up to ApplyTimeout,
// each attempt bounded by the rest of it.
func (p peerClient) infoRetry(httpAddr string) (bootstrapInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	wait := 50 * time.Millisecond
	for {
		info, err := p.info(ctx, httpAddr)
		if err == nil {
			return info, nil
		}
		select {
		case <-ctx.Done():
			return info, err
		case <-p.closing:
			return info, err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}
