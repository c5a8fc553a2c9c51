//go:build unix

package api

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/internal/testtool"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
)

// The status page in a real browser: Debian's chromium, headless, driven
// over the DevTools protocol. The protocol runs over a WebSocket; the small
// client below (text frames, client-side masking, fragmentation, ping) keeps
// the module free of a dependency used by one test.

// TestUIInBrowser loads /ui from a follower of a 3-node cluster and checks
// that it shows the leader, the members, the policy and the RLS domain, that the decisions chart moves
// while checks run, that a key can be peeked, and that the playground draws
// docs/ALGORITHMS.md's algorithm comparison; the page must log no error. Screenshots
// go to the test's temp dir, or to $LIMITD_UI_SCREENSHOTS when set.
func TestUIInBrowser(t *testing.T) {
	bin := testtool.Path(t, "chromium", "apt-get install chromium")
	c := newAPICluster(t, 3)
	leader := c.leader()
	page := (leader + 1) % 3 // a follower: the leader it shows is not itself
	if code, body := c.do(leader, "PUT", "/v1/policies/api", `{"algorithm":"token_bucket","limit":20,"window":"1s"}`); code != 200 {
		t.Fatalf("put policy: %d %s", code, body)
	}
	rls := "domain: shop\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 10\n"
	if code, body := c.do(leader, "PUT", "/v1/rls/domains/shop", rls); code != 200 {
		t.Fatalf("put RLS domain: %d %s", code, body)
	}
	shots := os.Getenv("LIMITD_UI_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}

	b := startBrowser(t, bin)
	b.navigate(c.URL(page) + "/ui")

	// The cluster as the follower sees it.
	leaderID := fmt.Sprintf("n%d", leader)
	b.waitFor(fmt.Sprintf(`document.getElementById("leader").textContent === %q`, leaderID), "the leader shown")
	b.waitFor(`document.querySelectorAll("#members tbody tr").length === 3`, "three members listed")
	b.waitFor(`document.querySelector('#policies tr[data-policy="api"]') !== null`, "the policy listed")
	b.waitFor(`document.getElementById("rls").textContent === "shop"`, "the RLS domain")
	if got := b.eval(`document.querySelector('#members tr[data-member="` + leaderID + `"] td:nth-child(5)').textContent`); got != "leader" {
		t.Errorf("the leader's row says %v", got)
	}

	// The chart moves while checks run against this node.
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 20000 && !stop.Load(); i++ {
			resp, err := http.Post(c.URL(page)+"/v1/check", "application/json",
				strings.NewReader(fmt.Sprintf(`{"key":"k%d","policy":"api"}`, i%4)))
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			time.Sleep(5 * time.Millisecond) // a steady trickle, some refused
		}
	}()
	before := b.evalInt(`Number(document.getElementById("chart").getAttribute("data-samples") || 0)`)
	b.waitFor(fmt.Sprintf(`Number(document.getElementById("chart").getAttribute("data-samples")) >= %d`, before+2), "two new samples")
	b.waitFor(`Number(document.getElementById("chart").getAttribute("data-max-rate")) > 0 &&
		document.querySelector('#chart polyline[data-policy="api"][data-result="allowed"]') !== null &&
		document.querySelector('#chart polyline[data-policy="api"][data-result="refused"]') !== null`, "the api policy's rates drawn")
	stop.Store(true)
	wg.Wait()
	b.screenshot(filepath.Join(shots, "status.png"))

	// A key lookup.
	b.eval(`document.getElementById("lookup-key").value = "k1"; document.getElementById("lookup-policy").value = "api";
		document.querySelector("#lookup-form button[type=submit]").click()`)
	b.waitFor(`document.getElementById("lookup-result").textContent.includes("of 20")`, "the peeked key's remaining")
	if hidden := b.eval(`document.getElementById("lookup-reset").hidden`); hidden != true {
		t.Errorf("reset button shown without a token: hidden = %v", hidden)
	}

	// The playground on docs/ALGORITHMS.md's comparison.
	readme := map[string]map[string]int{
		"edge":             {"fixed_window": 20, "sliding_log": 10, "sliding_window": 10, "token_bucket": 10, "leaky_bucket": 10},
		"early_then_later": {"fixed_window": 20, "sliding_log": 20, "sliding_window": 15, "token_bucket": 20, "leaky_bucket": 20},
	}
	for name, want := range readme {
		raw, err := os.ReadFile(filepath.Join("..", "cmd", "limitd", "testdata", "simulate", name+".trace"))
		if err != nil {
			t.Fatal(err)
		}
		b.eval(fmt.Sprintf(`document.getElementById("sim-results").replaceChildren();
			document.getElementById("sim-trace").value = %q; document.getElementById("sim-limit").value = "10";
			document.getElementById("sim-window").value = "60s"; document.getElementById("sim-burst").value = "";
			document.getElementById("sim-run").click()`, raw))
		b.waitFor(`document.querySelectorAll("#sim-results .sim-run svg rect").length > 0 &&
			document.querySelectorAll("#sim-results .sim-run").length === 5`, name+": five timelines")
		var got map[string]int
		js := `JSON.stringify(Object.fromEntries(Array.from(document.querySelectorAll("#sim-results .sim-run"),
			(e) => [e.dataset.algorithm, Number(e.dataset.admitted)])))`
		if err := json.Unmarshal([]byte(b.eval(js).(string)), &got); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: admitted %v, want the README's %v", name, got, want)
		}
		// Every run draws its timeline: refused bars exactly where it refused.
		for alg, n := range want {
			sel := fmt.Sprintf(`#sim-results svg[data-algorithm=%q] rect.refused`, alg)
			if bars := b.evalInt(`document.querySelectorAll('` + sel + `').length`); (bars > 0) != (n < 20) {
				t.Errorf("%s %s: %d refused bars for %d admitted of 20", name, alg, bars, n)
			}
		}
		b.screenshot(filepath.Join(shots, "playground-"+name+".png"))
	}
	for _, p := range b.problems() {
		// A follower not caught up answers /readyz 503, which the page
		// shows ("no: ..."); Chromium logs every non-2xx fetch. Under load
		// (a loaded 2-core machine) that happens mid-test.
		if notReadyAnswer(p) {
			continue
		}
		t.Errorf("browser console: %s", p)
	}

	// A malformed trace: the page shows the error naming the field and the
	// line (and the browser logs the 400 itself, nothing else).
	logged := len(b.problems())
	b.eval(`document.getElementById("sim-trace").value = "1 a\n2\n"; document.getElementById("sim-run").click()`)
	b.waitFor(`document.getElementById("sim-error").textContent.startsWith("trace: line 2: missing key")`, "the trace error")
	for _, p := range b.problems()[logged:] {
		if (!strings.Contains(p, "status of 400") || !strings.HasSuffix(p, "/v1/simulate")) && !notReadyAnswer(p) {
			t.Errorf("browser console after a malformed trace: %s", p)
		}
	}
	t.Logf("screenshots in %s", shots)
}

// notReadyAnswer reports Chromium's log line for a /readyz 503: the page
// fetched it and shows it; it is not a page error.
func notReadyAnswer(console string) bool {
	return strings.Contains(console, "status of 503") && strings.HasSuffix(console, "/readyz")
}

// TestUIInBrowserEmptyNode: a node without policies or checks says so
// ("none", "no checks answered yet") rather than showing empty tables, and
// RLS checks are charted under their domain, not as policy "inline".
func TestUIInBrowserEmptyNode(t *testing.T) {
	bin := testtool.Path(t, "chromium", "apt-get install chromium")
	store := newFakeStore()
	store.status = nodeapi.Status{NodeID: "n1", State: "Leader", LeaderID: "n1", LeaderHTTP: "127.0.0.1:1",
		Members: []nodeapi.Member{{ID: "n1", RaftAddr: "127.0.0.1:2", HTTPAddr: "127.0.0.1:1", Suffrage: "Voter", Leader: true, Health: "healthy", Healthy: true}}}
	srv := httptest.NewServer(newAPI(store, Config{Logger: discardLogger()}).Handler())
	t.Cleanup(srv.Close)
	b := startBrowser(t, bin)
	b.navigate(srv.URL + "/ui")
	b.waitFor(`document.getElementById("status").textContent.startsWith("Updated") &&
		document.querySelector("#policies tbody tr.empty") !== null && document.querySelector("#policies tbody").textContent === "none" &&
		document.querySelector("#rates tbody").textContent === "no checks answered yet" &&
		document.querySelector("#members tbody tr.placeholder") === null`, "the empty policy and rate tables saying so")
	b.waitFor(`document.querySelector("#plans tbody").textContent === "no plans" &&
		document.querySelector("#prefix-rules tbody").textContent === "no prefix rules" &&
		document.getElementById("default-plan").textContent.startsWith("none") &&
		document.querySelector("#top-keys tbody").textContent === "no policies or plans"`, "no plans, prefix rules or policies for top keys, saying so")
}

// TestUIInBrowserAdminToken: on a node with an admin token the page is
// read-only and shows the public view until the token is entered; a wrong
// token is reported; the right one shows the members and lets a key be
// reset; the token is kept in no storage, and Forget returns to read-only.
func TestUIInBrowserAdminToken(t *testing.T) {
	bin := testtool.Path(t, "chromium", "apt-get install chromium")
	const token = "s3cret-token"
	store := newFakeStore()
	store.status = nodeapi.Status{NodeID: "n1", State: "Leader", LeaderID: "n1", LeaderHTTP: "127.0.0.1:1",
		Term: 4, CommitIndex: 9, AppliedIndex: 9,
		Members: []nodeapi.Member{{ID: "n1", RaftAddr: "127.0.0.1:2", HTTPAddr: "127.0.0.1:1", Suffrage: "Voter", Leader: true, Healthy: true}}}
	store.putPolicy(t, "api", algo.Config{Algorithm: "token_bucket", Limit: 2, Window: "1m"}, false)
	srv := httptest.NewServer(newAPI(store, Config{AdminToken: token, Logger: discardLogger()}).Handler())
	t.Cleanup(srv.Close)
	for i := 0; i < 2; i++ {
		resp, err := http.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(`{"key":"k","policy":"api"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	b := startBrowser(t, bin)
	b.navigate(srv.URL + "/ui")
	b.waitFor(`document.getElementById("leader").textContent === "n1" && !document.getElementById("public-note").hidden &&
		document.querySelectorAll("#members tbody tr").length === 1 && document.querySelector('#members tr[data-member="n1"] td:nth-child(3)').textContent === "–" &&
		document.getElementById("term").textContent === "–" &&
		document.getElementById("mode").textContent === "read-only" && document.getElementById("lookup-reset").hidden &&
		document.getElementById("rls").textContent === "none"`, "the public view (and no RLS domains: this store has none)")

	submit := func(tok string) {
		b.eval(fmt.Sprintf(`document.getElementById("token").value = %q; document.querySelector("#token-form button[type=submit]").click()`, tok))
	}
	submit("wrong")
	b.waitFor(`document.getElementById("status").textContent.includes("token was refused") &&
		!document.getElementById("public-note").hidden`, "the wrong token reported")
	submit(token)
	b.waitFor(`document.querySelector('#members tr[data-member="n1"] td:nth-child(3)').textContent === "127.0.0.1:2" && document.getElementById("term").textContent === "4" &&
		document.getElementById("mode").textContent === "admin" && !document.getElementById("lookup-reset").hidden &&
		document.getElementById("public-note").hidden && document.getElementById("status").textContent.startsWith("Updated")`, "the admin view")

	b.eval(`document.getElementById("lookup-key").value = "k"; document.getElementById("lookup-policy").value = "api";
		document.querySelector("#lookup-form button[type=submit]").click()`)
	b.waitFor(`document.getElementById("lookup-result").textContent.includes("0 of 2")`, "the spent key")
	b.eval(`window.confirm = () => true; document.getElementById("lookup-reset").click()`)
	// The fake store records the reset command rather than applying it.
	deadline := time.Now().Add(20 * time.Second)
	for {
		store.mu.Lock()
		n := len(store.applied)
		store.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d commands applied after the reset, want 1; page error %q", n, b.eval(`document.getElementById("lookup-error").textContent`))
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.waitFor(`document.getElementById("lookup-error").textContent === "" && document.getElementById("lookup-result").textContent.includes("of 2")`, "the key peeked again")

	kept := b.eval(`localStorage.length + sessionStorage.length === 0 && document.cookie === "" &&
		document.getElementById("token").value === "" && !document.documentElement.outerHTML.includes(` + fmt.Sprintf("%q", token) + `)`)
	if kept != true {
		t.Errorf("the token is kept somewhere besides the page's memory")
	}
	b.screenshot(filepath.Join(t.TempDir(), "admin.png"))
	b.eval(`document.getElementById("token-forget").click()`)
	b.waitFor(`document.getElementById("mode").textContent === "read-only" && document.getElementById("lookup-reset").hidden &&
		document.querySelector('#members tr[data-member="n1"] td:nth-child(3)').textContent === "–"`, "read-only again")
	for _, p := range b.problems() {
		t.Errorf("browser console: %s", p)
	}
}

// TestUIInBrowserLeases: the leases panel shows the lease counters to
// anyone and, once the admin token is entered, the keys this node holds
// leases on (key, policy, units left and spent, expiry), capped at
// StatusLeaseKeys with the rest counted below the table.
func TestUIInBrowserLeases(t *testing.T) {
	bin := testtool.Path(t, "chromium", "apt-get install chromium")
	const token = "s3cret-token"
	c := leaseNode(t, token)
	keys := []string{}
	for i := 0; i < StatusLeaseKeys+8; i++ {
		keys = append(keys, fmt.Sprintf("tenant/%02d", i))
	}
	// Checks keep every key busy (an idle key's leases go back after a second).
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			for _, k := range keys {
				resp, err := http.Post(c.URL(0)+"/v1/check", "application/json", strings.NewReader(`{"key":"`+k+`","policy":"quota"}`))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
	defer wg.Wait()
	defer stop.Store(true)

	b := startBrowser(t, bin)
	b.navigate(c.URL(0) + "/ui")
	b.waitFor(`Number(document.getElementById("lease-taken").textContent) > 0 &&
		Number(document.getElementById("lease-answered").textContent) > 0 &&
		document.querySelector("#leases tbody").textContent === "the admin token is needed to see leased keys" &&
		document.querySelector("#leases tr[data-key]") === null`, "the public view: counters, no key names")

	b.eval(fmt.Sprintf(`document.getElementById("token").value = %q; document.querySelector("#token-form button[type=submit]").click()`, token))
	b.waitFor(fmt.Sprintf(`document.querySelectorAll("#leases tbody tr[data-key]").length === %d &&
		!document.getElementById("leases-more").hidden &&
		document.getElementById("leases-more").textContent.startsWith("and 8 more keys")`, StatusLeaseKeys), "the capped list of leased keys")
	row := b.eval(`Array.from(document.querySelector("#leases tbody tr[data-key]").cells, (td) => td.textContent).join("|")`).(string)
	cells := strings.Split(row, "|")
	if len(cells) != 5 || !strings.HasPrefix(cells[0], "tenant/") || cells[1] != "quota" || !strings.HasSuffix(cells[4], " s") {
		t.Fatalf("a leased key's row: %q", row)
	}
	if left, spent := b.evalInt(`Number(document.querySelector("#leases tbody tr[data-key] td:nth-child(3)").textContent)`),
		b.evalInt(`Number(document.querySelector("#leases tbody tr[data-key] td:nth-child(4)").textContent)`); left <= 0 || spent <= 0 {
		t.Fatalf("a leased key's row: %q", row)
	}
	b.screenshot(filepath.Join(t.TempDir(), "leases.png"))
	for _, p := range b.problems() {
		if !notReadyAnswer(p) {
			t.Errorf("browser console: %s", p)
		}
	}
}

// TestUIInBrowserQuotasAndWorkInFlight: the Plans section lists each plan
// with its limits, the default plan and the prefix rules; Top keys shows a
// policy's keys allowed and refused over 5 min and 1 h; Key shows a key's
// plan, its override and its end, each plan limit's use and kept history,
// and, under a policy, its held concurrency slot and open reservation with
// their expiries, read again on every poll (a released slot goes). Admin
// reads wait for the token (none is asked for before: a refused read would
// be logged); an unknown key says it has no plan.
func TestUIInBrowserQuotasAndWorkInFlight(t *testing.T) {
	bin := testtool.Path(t, "chromium", "apt-get install chromium")
	ts, store := newPlanServer(t)
	store.Log.SetNow(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixNano())
	for _, put := range [][2]string{
		{"/v1/plans/pro", `{"limits":{"daily":{"algorithm":"fixed_window","limit":100,"window":"1h","history":"2d"},"burst":{"algorithm":"token_bucket","limit":10,"window":"1s"}}}`},
		{"/v1/plans/free", `{"limits":{"daily":{"algorithm":"fixed_window","limit":5,"window":"1h"}}}`},
		{"/v1/prefix-rules/team/", `{"plan":"pro"}`},
		{"/v1/keys/u%2F1/plan", `{"plan":"pro"}`},
		{"/v1/keys/u%2F1/override", `{"limits":{"daily":{"limit":200}},"expires":"2030-01-01T00:00:00Z"}`}, // the service refuses an end not after its own clock
		{"/v1/policies/api", `{"algorithm":"fixed_window","limit":2,"window":"1h"}`},
		{"/v1/policies/jobs", `{"algorithm":"concurrency","limit":2,"hold":"60s"}`},
		{"/v1/policies/tokens", `{"algorithm":"fixed_window","limit":1000,"window":"1h"}`},
	} {
		ts.want(ts.do("PUT", put[0], put[1], admin), 200, "", "")
	}
	for i := 0; i < 3; i++ { // daily: 3 used in the first hour, a closed window in history
		ts.want(ts.do("POST", "/v1/check", `{"key":"u/1"}`), 200, "", "")
	}
	store.Log.Advance(time.Hour)
	ts.want(ts.do("POST", "/v1/check", `{"key":"u/1"}`), 200, "", "")
	for _, k := range []string{"hot", "hot", "hot", "cold"} { // hot: 2 allowed, 1 refused
		ts.do("POST", "/v1/check", `{"key":"`+k+`","policy":"api"}`)
	}
	slot := ts.do("POST", "/v1/check", `{"key":"u/1","policy":"jobs"}`).json(t)["slot"]
	res := ts.do("POST", "/v1/check", `{"key":"u/1","policy":"tokens","cost":7,"reserve":{"hold":"90s"}}`).json(t)["reservation"]
	if slot == nil || res == nil {
		t.Fatalf("slot %v, reservation %v", slot, res)
	}
	srv := httptest.NewServer(ts.h)
	t.Cleanup(srv.Close)

	b := startBrowser(t, bin)
	b.navigate(srv.URL + "/ui")
	b.waitFor(`document.querySelector('#plans tr[data-plan="pro"][data-limit="daily"]') !== null &&
		document.querySelector('#plans tr[data-plan="pro"][data-limit="daily"] td:nth-child(7)').textContent === "2d" &&
		document.querySelector('#plans tr[data-plan="pro"][data-limit="burst"] td:nth-child(3)').textContent === "token_bucket" &&
		document.querySelector('#plans tr[data-plan="free"] td:nth-child(7)').textContent === "not kept" &&
		document.getElementById("default-plan").textContent.startsWith("none") &&
		document.querySelector('#prefix-rules tr[data-prefix="team/"] td:nth-child(2)').textContent === "pro" &&
		document.querySelector('#policies tr[data-policy="jobs"] td:nth-child(4)').textContent === "hold 1m" &&
		document.querySelector("#top-keys tbody").textContent === "the admin token is needed to see top keys"`, "the plans, the prefix rule and no top keys without the token")

	b.eval(`document.getElementById("token").value = "tok"; document.querySelector("#token-form button[type=submit]").click()`)
	b.waitFor(`document.getElementById("mode").textContent === "admin"`, "the admin mode")
	b.eval(`const s = document.getElementById("top-policy"); s.value = "api"; s.dispatchEvent(new Event("change"))`)
	b.waitFor(`document.querySelector('#top-keys tr[data-key="hot"] td[data-view="5m-allowed"]') !== null &&
		document.querySelector('#top-keys tr[data-key="hot"] td[data-view="5m-allowed"]').textContent === "2" &&
		document.querySelector('#top-keys tr[data-key="hot"] td[data-view="5m-refused"]').textContent === "1" &&
		document.querySelector('#top-keys tr[data-key="hot"] td[data-view="1h-allowed"]').textContent === "2" &&
		document.querySelector('#top-keys tr[data-key="hot"] td[data-view="1h-refused"]').textContent === "1" &&
		document.querySelector('#top-keys tr[data-key="cold"] td[data-view="5m-refused"]').textContent === "–" &&
		document.querySelector("#top-keys tbody tr").dataset.key === "hot"`, "the top keys of api, hot first")
	// A plan's top keys: u/1's plan checks (pro), one since the hour passed.
	b.eval(`{ const s = document.getElementById("top-policy"); s.value = "plan/pro"; s.dispatchEvent(new Event("change")) }`)
	b.waitFor(`document.querySelector('#top-keys tr[data-key="u/1"] td[data-view="5m-allowed"]') !== null &&
		document.querySelector('#top-keys tr[data-key="u/1"] td[data-view="5m-allowed"]').textContent === "1" &&
		document.querySelector('#top-keys tr[data-key="hot"]') === null`, "the top keys of plan pro")

	show := func(key, limit string) {
		b.eval(fmt.Sprintf(`document.getElementById("key-error").textContent = "x"; document.getElementById("key-name").value = %q;
			document.getElementById("key-limit").value = %q; document.querySelector("#key-form button[type=submit]").click()`, key, limit))
		b.waitFor(`document.getElementById("key-error").textContent !== "x"`, "the key shown")
	}
	show("u/1", "")
	b.waitFor(`document.querySelector('#key-plan dd[data-fact="plan"]').textContent === "pro (assigned to it)" &&
		document.querySelector('#key-plan dd[data-fact="override"]').textContent === "daily: limit 200, until 2030-01-01T00:00:00Z" &&
		document.querySelector('#key-limits tr[data-limit="daily"] td:nth-child(2)').textContent === "1" &&
		document.querySelector('#key-limits tr[data-limit="daily"] td:nth-child(3)').textContent === "199" &&
		document.querySelector('#key-limits tr[data-limit="daily"] td.history').textContent === "2026-12-01T10:00:00Z: 3 used, 0 refused" &&
		document.querySelector('#key-limits tr[data-limit="burst"] td.history').textContent === "not kept" &&
		document.querySelector("#key-slots tbody").textContent === "none held" &&
		document.querySelector("#key-reservations tbody").textContent === "none open"`, "the key's plan, override, limits and history")

	show("u/1", "jobs")
	b.waitFor(fmt.Sprintf(`document.querySelector('#key-slots tr[data-slot=%q] td:nth-child(3)') !== null &&
		document.querySelector('#key-slots tr[data-slot=%q] td:nth-child(3)').textContent === "2026-12-01T11:01:00.000Z (in 60 s)" &&
		document.querySelector("#key-reservations tbody").textContent === "none open"`, slot, slot), "the held slot and its expiry")
	// The section is read again on every poll: the released slot goes.
	ts.want(ts.do("POST", "/v1/release", fmt.Sprintf(`{"key":"u/1","policy":"jobs","slot":%q}`, slot)), 200, "", "")
	b.waitFor(`document.querySelector("#key-slots tbody").textContent === "none held"`, "the released slot gone on the next poll")

	show("u/1", "tokens")
	b.waitFor(fmt.Sprintf(`document.querySelector('#key-reservations tr[data-reservation=%q]') !== null &&
		document.querySelector('#key-reservations tr[data-reservation=%q] td:nth-child(3)').textContent === "7" &&
		document.querySelector('#key-reservations tr[data-reservation=%q] td:nth-child(4)').textContent === "2026-12-01T11:01:30.000Z (in 90 s)" &&
		document.querySelector('#key-limits tr[data-limit="policy tokens"] td:nth-child(2)').textContent === "7" &&
		document.querySelector("#key-slots tbody").textContent === "none held"`, res, res, res), "the open reservation, its estimate and expiry")
	shots := os.Getenv("LIMITD_UI_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	b.screenshot(filepath.Join(shots, "quotas.png"))

	show("nobody", "")
	b.waitFor(`document.querySelector('#key-plan dd[data-fact="plan"]').textContent.startsWith("none") &&
		document.querySelector('#key-plan dd[data-fact="override"]').textContent === "none" &&
		document.querySelector("#key-limits tbody").textContent === "the key has no plan: pick a policy to see it under one"`, "an unknown key")
	show("nobody", "api")
	b.waitFor(`document.querySelector('#key-limits tr[data-limit="policy api"] td:nth-child(2)').textContent === "0 (no state)" &&
		document.querySelector("#key-slots tbody").textContent === "none held"`, "an unknown key under a policy")
	for _, p := range b.problems() {
		t.Errorf("browser console: %s", p)
	}
}

// browser is one headless chromium with one page attached.
type browser struct {
	t       *testing.T
	ws      *wsConn
	session string

	mu       sync.Mutex
	nextID   int64
	pending  map[int64]chan cdpMessage
	console  []string // errors and warnings the page logged
	readErr  error
	closedCh chan struct{}
}

type cdpMessage struct {
	ID        int64           `json:"id,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// startBrowser runs chromium headless with a fresh profile, attaches to a
// new page and enables the console, log and page domains.
func startBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	profile := t.TempDir()
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
		"--user-data-dir="+profile, "about:blank")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its helpers die with it
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	wsURL := make(chan string, 1)
	var logTail []string
	var logMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			logTail = append(logTail, line)
			logMu.Unlock()
			if _, u, ok := strings.Cut(line, "DevTools listening on "); ok {
				wsURL <- strings.TrimSpace(u)
			}
		}
	}()
	var u string
	select {
	case u = <-wsURL:
	case <-time.After(30 * time.Second):
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("chromium did not start its DevTools endpoint:\n%s", strings.Join(logTail, "\n"))
	}
	ws, err := dialWebSocket(u)
	if err != nil {
		t.Fatalf("connect to chromium at %s: %v", u, err)
	}
	t.Cleanup(func() { ws.conn.Close() })
	b := &browser{t: t, ws: ws, pending: map[int64]chan cdpMessage{}, closedCh: make(chan struct{})}
	go b.readLoop()

	var target struct {
		TargetID string `json:"targetId"`
	}
	b.callInto("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	b.callInto("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached)
	b.session = attached.SessionID
	for _, m := range []string{"Runtime.enable", "Log.enable", "Page.enable"} {
		b.callInto(b.session, m, nil, nil)
	}
	b.callInto(b.session, "Emulation.setDeviceMetricsOverride",
		map[string]any{"width": 1280, "height": 1600, "deviceScaleFactor": 1, "mobile": false}, nil)
	return b
}

func (b *browser) readLoop() {
	defer close(b.closedCh)
	for {
		data, err := b.ws.read()
		if err != nil {
			b.mu.Lock()
			b.readErr = err
			for _, ch := range b.pending {
				close(ch)
			}
			b.pending = map[int64]chan cdpMessage{}
			b.mu.Unlock()
			return
		}
		var m cdpMessage
		if err := json.Unmarshal(data, &m); err != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch, ok := b.pending[m.ID]; ok {
				delete(b.pending, m.ID)
				ch <- m
			}
		} else if p := consoleProblem(m); p != "" {
			b.console = append(b.console, p)
		}
		b.mu.Unlock()
	}
}

// consoleProblem describes an event that is an error or warning on the
// page's console ("" for other events). A 404 for /v1/rls/domains is
// expected: the page asks once whether the node has RLS domains.
func consoleProblem(m cdpMessage) string {
	switch m.Method {
	case "Runtime.exceptionThrown":
		return "exception: " + string(m.Params)
	case "Runtime.consoleAPICalled":
		var p struct {
			Type string            `json:"type"`
			Args []json.RawMessage `json:"args"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if p.Type == "error" || p.Type == "warning" || p.Type == "assert" {
			return "console." + p.Type + ": " + string(m.Params)
		}
	case "Log.entryAdded":
		var p struct {
			Entry struct {
				Level, Source, Text, URL string
			} `json:"entry"`
		}
		_ = json.Unmarshal(m.Params, &p)
		e := p.Entry
		if e.Source == "network" && strings.HasSuffix(e.URL, "/v1/rls/domains") && strings.Contains(e.Text, "404") {
			return ""
		}
		if e.Level == "error" || e.Level == "warning" {
			return fmt.Sprintf("%s %s: %s %s", e.Level, e.Source, e.Text, e.URL)
		}
	}
	return ""
}

func (b *browser) problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.console...)
}

// callInto sends a DevTools command and decodes its result into out (unless nil).
func (b *browser) callInto(session, method string, params any, out any) {
	b.t.Helper()
	raw, err := b.call(session, method, params)
	if err != nil {
		b.t.Fatalf("%s: %v", method, err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			b.t.Fatalf("%s: decode %s: %v", method, raw, err)
		}
	}
}

func (b *browser) call(session, method string, params any) (json.RawMessage, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	if params == nil {
		p = []byte("{}")
	}
	ch := make(chan cdpMessage, 1)
	b.mu.Lock()
	if b.readErr != nil {
		b.mu.Unlock()
		return nil, b.readErr
	}
	b.nextID++
	id := b.nextID
	b.pending[id] = ch
	b.mu.Unlock()
	msg, _ := json.Marshal(cdpMessage{ID: id, SessionID: session, Method: method, Params: p})
	if err := b.ws.writeText(msg); err != nil {
		return nil, err
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("connection closed: %v", b.readErr)
		}
		if m.Error != nil {
			return nil, errors.New(m.Error.Message)
		}
		return m.Result, nil
	case <-time.After(30 * time.Second):
		return nil, errors.New("no answer within 30 s")
	}
}

func (b *browser) navigate(u string) {
	b.t.Helper()
	var r struct {
		ErrorText string `json:"errorText"`
	}
	b.callInto(b.session, "Page.navigate", map[string]any{"url": u}, &r)
	if r.ErrorText != "" {
		b.t.Fatalf("navigate to %s: %s", u, r.ErrorText)
	}
}

// eval runs a JavaScript expression in the page and returns its value.
func (b *browser) eval(expr string) any {
	b.t.Helper()
	v, err := b.tryEval(expr)
	if err != nil {
		b.t.Fatalf("eval %s: %v", expr, err)
	}
	return v
}

func (b *browser) tryEval(expr string) (any, error) {
	raw, err := b.call(b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true})
	if err != nil {
		return nil, err
	}
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
		ExceptionDetails json.RawMessage `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	if r.ExceptionDetails != nil {
		return nil, fmt.Errorf("exception: %s", r.ExceptionDetails)
	}
	return r.Result.Value, nil
}

func (b *browser) evalInt(expr string) int {
	b.t.Helper()
	f, ok := b.eval(expr).(float64)
	if !ok {
		b.t.Fatalf("eval %s: not a number", expr)
	}
	return int(f)
}

// waitFor polls a condition in the page: the page updates on its own
// timers, so there is no event to wait on from here.
func (b *browser) waitFor(cond, what string) {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, err := b.tryEval(cond)
		if v == true {
			return
		}
		if time.Now().After(deadline) {
			status, _ := b.tryEval(`document.getElementById("status") && document.getElementById("status").textContent`)
			b.t.Fatalf("waiting for %s: %s is %v (%v); page status %q; console %q", what, cond, v, err, status, b.problems())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *browser) screenshot(path string) {
	b.t.Helper()
	var r struct {
		Data string `json:"data"`
	}
	b.callInto(b.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &r)
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// wsConn is the client end of a WebSocket (RFC 6455), enough for DevTools:
// text messages, fragmented or not, pings answered.
type wsConn struct {
	conn net.Conn
	r    *bufio.Reader
	wmu  sync.Mutex
}

func dialWebSocket(rawURL string) (*wsConn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "ws" {
		return nil, fmt.Errorf("scheme %q: want ws", u.Scheme)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	key := base64.StdEncoding.EncodeToString(nonce)
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", u.RequestURI(), u.Host, key)
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		conn.Close()
		return nil, fmt.Errorf("handshake refused: %s", resp.Status)
	}
	return &wsConn{conn: conn, r: r}, nil
}

const (
	wsContinuation = 0x0
	wsText         = 0x1
	wsClose        = 0x8
	wsPing         = 0x9
	wsPong         = 0xA
)

// writeFrame sends one final frame, masked as clients must.
func (c *wsConn) writeFrame(opcode byte, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	hdr := []byte{0x80 | opcode}
	switch n := len(payload); {
	case n < 126:
		hdr = append(hdr, 0x80|byte(n))
	case n <= 0xFFFF:
		hdr = append(hdr, 0x80|126)
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(n))
	default:
		hdr = append(hdr, 0x80|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	hdr = append(hdr, mask[:]...)
	masked := make([]byte, len(payload))
	for i, v := range payload {
		masked[i] = v ^ mask[i%4]
	}
	_, err := c.conn.Write(append(hdr, masked...))
	return err
}

func (c *wsConn) writeText(p []byte) error { return c.writeFrame(wsText, p) }

// read returns the next whole text message.
func (c *wsConn) read() ([]byte, error) {
	var msg []byte
	for {
		var h [2]byte
		if _, err := io.ReadFull(c.r, h[:]); err != nil {
			return nil, err
		}
		fin, opcode := h[0]&0x80 != 0, h[0]&0x0F
		n := uint64(h[1] & 0x7F)
		switch n {
		case 126:
			var ext [2]byte
			if _, err := io.ReadFull(c.r, ext[:]); err != nil {
				return nil, err
			}
			n = uint64(binary.BigEndian.Uint16(ext[:]))
		case 127:
			var ext [8]byte
			if _, err := io.ReadFull(c.r, ext[:]); err != nil {
				return nil, err
			}
			n = binary.BigEndian.Uint64(ext[:])
		}
		if h[1]&0x80 != 0 || n > 256<<20 {
			return nil, fmt.Errorf("bad frame from the server (masked or %d bytes)", n)
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(c.r, payload); err != nil {
			return nil, err
		}
		switch opcode {
		case wsPing:
			if err := c.writeFrame(wsPong, payload); err != nil {
				return nil, err
			}
			continue
		case wsPong:
			continue
		case wsClose:
			return nil, io.EOF
		case wsText, wsContinuation:
			msg = append(msg, payload...)
			if fin {
				return msg, nil
			}
		default:
			return nil, fmt.Errorf("unexpected frame opcode %d", opcode)
		}
	}
}

// slotsSource is a node with data groups' slot map (groups.Host's).
type slotsSource struct{ v service.Slots }

func (s slotsSource) Slots(context.Context) (service.Slots, error) { return s.v, nil }

// TestUIInBrowserDataGroups: a node with data groups lists its groups
// (id, leader or "none", replicas, slot count) under the members; a
// one-group node shows no groups table (TestUIInBrowserEmptyNode's page).
func TestUIInBrowserDataGroups(t *testing.T) {
	bin := testtool.Path(t, "chromium", "apt-get install chromium")
	store := newFakeStore()
	store.status = nodeapi.Status{NodeID: "n1", State: "Leader", LeaderID: "n1", LeaderHTTP: "127.0.0.1:1",
		Members: []nodeapi.Member{{ID: "n1", RaftAddr: "127.0.0.1:2", HTTPAddr: "127.0.0.1:1", Suffrage: "Voter", Leader: true, Health: "healthy", Healthy: true}}}
	src := slotsSource{service.Slots{Epoch: 1, Groups: []service.SlotGroup{
		{ID: 0, Leader: "n1", Replicas: []string{"n1", "n2"}, Slots: [][2]uint16{}},
		{ID: 1, Leader: "n2", Replicas: []string{"n1", "n2"}, Slots: [][2]uint16{{0, 99}, {200, 4095}}},
		{ID: 2, Leader: "", Replicas: []string{"n1", "n2"}, Slots: [][2]uint16{{100, 199}}}}}}
	srv := httptest.NewServer(newAPI(store, Config{Logger: discardLogger()}, service.Config{Slots: src}).Handler())
	t.Cleanup(srv.Close)
	b := startBrowser(t, bin)
	b.navigate(srv.URL + "/ui")
	b.waitFor(`!document.getElementById("groups").hidden && document.querySelectorAll("#groups tbody tr").length === 3`, "three groups listed")
	for _, c := range []struct{ group, want string }{
		{"0", "0 (configuration)n1n1, n20"}, {"1", "1n2n1, n23996"}, {"2", "2nonen1, n2100"},
	} {
		if got := b.eval(`document.querySelector('#groups tr[data-group="` + c.group + `"]').textContent`); got != c.want {
			t.Errorf("group %s's row: %v, want %q", c.group, got, c.want)
		}
	}

	one := httptest.NewServer(newAPI(store, Config{Logger: discardLogger()}).Handler())
	t.Cleanup(one.Close)
	b.navigate(one.URL + "/ui")
	b.waitFor(`document.getElementById("status").textContent.startsWith("Updated") && document.querySelector("#members tbody tr.placeholder") === null`, "the one-group page polled")
	if got := b.eval(`document.getElementById("groups").hidden`); got != true {
		t.Errorf("a one-group node shows the groups table (hidden %v)", got)
	}
}
