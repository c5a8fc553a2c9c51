// limitd status page. Plain script, no build step, no dependencies. It reads
// the node's public API every 2 s; the admin token, when entered, lives only
// in the variable below (never in storage, cookies or URLs).
"use strict";

const POLL_MS = 2000;
const HISTORY_MS = 5 * 60 * 1000;
const SVG_NS = "http://www.w3.org/2000/svg";
const ALGORITHMS = ["fixed_window", "sliding_log", "sliding_window", "token_bucket", "leaky_bucket"];
const PALETTE = ["#1f6feb", "#bf8700", "#8250df", "#1a7f37", "#cf222e", "#0a7ea4", "#d4469a", "#57606a"];

let token = "";
let tokenRejected = false; // the node answered the public view despite the token
let adminView = false;     // the node answered the admin view: admin reads will not be refused
let rlsAvailable = true;
let lastCounters = null; // {time, values: Map "policy\u0000result" -> number}
const history = [];      // [{time, rates: Map policy -> {allowed, refused}}]
const colors = new Map(); // policy -> color, stable while the page is open

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : String(c));
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function headers(extra) {
  const h = Object.assign({}, extra);
  if (token) h.Authorization = "Bearer " + token;
  return h;
}

// api fetches a JSON endpoint; it resolves to {status, body} and never throws
// for HTTP errors (network failures do throw).
async function api(method, path, body, anonymous) {
  const h = body === undefined ? {} : { "Content-Type": "application/json" };
  const opts = { method, headers: anonymous ? h : headers(h), cache: "no-store" };
  if (body !== undefined) opts.body = JSON.stringify(body);
  const resp = await fetch(path, opts);
  let data = null;
  try { data = await resp.json(); } catch (_) { data = null; }
  return { status: resp.status, body: data };
}

function errorText(r) {
  const e = r.body && r.body.error;
  if (!e) return "HTTP " + r.status;
  return (e.field ? e.field + ": " : "") + e.message + " (" + e.code + ")";
}

// fill replaces a table's rows; an empty list shows one row saying so
// (emptyText), as the RLS domains line says "none".
function fill(tbody, rows, emptyText) {
  if (rows.length === 0 && emptyText) {
    const cols = tbody.parentElement.tHead.rows[0].cells.length;
    rows = [el("tr", { class: "empty" }, el("td", { colspan: cols, class: "muted" }, emptyText))];
  }
  tbody.replaceChildren(...rows);
}

// ---- cluster ----

async function refreshCluster() {
  const r = await api("GET", "/v1/cluster");
  if (r.status !== 200) throw new Error("/v1/cluster: " + errorText(r));
  const ready = await api("GET", "/readyz", undefined, true);
  const c = r.body;
  $("leader").textContent = c.leader_id || "none (no leader)";
  $("state").textContent = (c.node_id ? c.node_id + ", " : "") + c.state;
  const full = typeof c.node_id === "string"; // the public view has no node id, Raft addresses or terms
  // A wrong token gets the public view, as no token does.
  tokenRejected = token !== "" && !full;
  adminView = full;
  $("public-note").hidden = full;
  $("ready").textContent = ready.status === 200 ? "yes" : "no: " + errorText(ready);
  $("term").textContent = full ? c.term : "–";
  $("indexes").textContent = full ? c.commit_index + " / " + c.applied_index : "–";
  $("node").textContent = c.node_id ? "node " + c.node_id : "node id: needs the admin token";
  refreshLeaseKeys(full ? c.leases : null);
  const members = c.members || [];
  const health = (m) => m.health || (m.healthy ? "healthy" : "unhealthy");
  fill($("members").tBodies[0], members.map((m) => el("tr", { "data-member": m.id },
    el("td", {}, m.id), el("td", {}, m.http_addr || "–"), el("td", {}, m.raft_addr || "–"), el("td", {}, m.suffrage || "–"),
    el("td", {}, m.leader ? "leader" : "follower"),
    full ? el("td", { class: health(m) === "healthy" ? "ok" : (health(m) === "unknown" ? "" : "bad") }, health(m)) : el("td", {}, "–"))), "none");
  await refreshGroups();
}

// refreshGroups lists the Raft groups of a node with data groups (GET
// /v1/cluster/slots: id, leader, replicas, slots owned); a one-group node
// shows no table.
async function refreshGroups() {
  const r = await api("GET", "/v1/cluster/slots");
  const groups = r.status === 200 ? (r.body.groups || []) : [];
  $("groups").hidden = groups.length < 2;
  if (groups.length < 2) return;
  const count = (g) => (g.slots || []).reduce((n, run) => n + run[1] - run[0] + 1, 0);
  fill($("groups").tBodies[0], groups.map((g) => el("tr", { "data-group": String(g.id) },
    el("td", {}, g.id === 0 ? "0 (configuration)" : String(g.id)),
    el("td", { class: g.leader ? "" : "bad" }, g.leader || "none"),
    el("td", {}, (g.replicas || []).join(", ")), el("td", {}, String(count(g))))));
}

// ---- leases: the keys from the admin view of /v1/cluster, the counters from /metrics ----

// refreshLeaseKeys lists the leased keys (the most spent first, as many as
// the node sends); leases is null in the public view: key names are for admins.
function refreshLeaseKeys(leases) {
  const more = $("leases-more");
  if (!leases) {
    fill($("leases").tBodies[0], [], "the admin token is needed to see leased keys");
    more.hidden = true;
    return;
  }
  const keys = leases.keys || [];
  fill($("leases").tBodies[0], keys.map((k) => el("tr", { "data-key": k.key, "data-policy": k.policy },
    el("td", {}, k.key), el("td", {}, k.policy), el("td", {}, k.left), el("td", {}, k.spent),
    el("td", {}, (k.expires_in_ms / 1000).toFixed(1) + " s"))), "none");
  more.hidden = !leases.more;
  more.textContent = leases.more ? "and " + leases.more + " more keys with leases (the " + keys.length + " most spent are listed)" : "";
}

const LEASE_COUNTERS = {
  limitd_leases_taken_total: "lease-taken", limitd_leases_returned_total: "lease-returned",
  limitd_leases_lost_total: "lease-lost", limitd_leases_revoked_total: "lease-revoked",
  limitd_lease_checks_total: "lease-answered", limitd_leased_keys: "lease-keys",
};

// refreshLeaseCounters shows the lease metrics (unlabelled lines of the
// Prometheus text); a node without them leaves "–".
function refreshLeaseCounters(text) {
  for (const line of text.split("\n")) {
    const [name, value] = line.split(" ");
    if (Object.hasOwn(LEASE_COUNTERS, name)) $(LEASE_COUNTERS[name]).textContent = Number(value);
  }
}

// ---- policies and RLS domains ----

async function refreshPolicies() {
  const r = await api("GET", "/v1/policies");
  if (r.status !== 200) throw new Error("/v1/policies: " + errorText(r));
  const ps = r.body.policies || [];
  fill($("policies").tBodies[0], ps.map((p) => el("tr", { "data-policy": p.name },
    el("td", {}, p.name), el("td", {}, p.algorithm), el("td", {}, p.limit),
    el("td", {}, windowText(p)),
    el("td", {}, p.burst || "–"), el("td", {}, p.shadow ? "shadow" : "enforced"))), "none");
  const sel = $("lookup-policy");
  const current = sel.value;
  const names = ps.map((p) => p.name);
  if (names.join("\u0000") !== Array.from(sel.options, (o) => o.value).join("\u0000")) {
    sel.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    if (names.includes(current)) sel.value = current;
  }
  topChoices.policies = names;
  syncTopChoices();
  syncOptions($("key-limit"), [["", "its plan's limits"]].concat(names.map((n) => [n, "policy " + n])));
}

// syncOptions replaces a select's options ([value, label]) when they
// changed, keeping the choice when it is still offered.
function syncOptions(sel, options) {
  const current = sel.value;
  if (options.map((o) => o[0]).join("\u0000") === Array.from(sel.options, (o) => o.value).join("\u0000")) return;
  sel.replaceChildren(...options.map(([v, label]) => el("option", { value: v }, label)));
  if (options.some((o) => o[0] === current)) sel.value = current;
}

async function refreshRLS() {
  if (!rlsAvailable) return;
  const r = await api("GET", "/v1/rls/domains");
  if (r.status === 404 && !(r.body && r.body.domains)) {
    rlsAvailable = false; // this node has no RLS endpoint: do not ask again
    $("rls").textContent = "none";
    return;
  }
  if (r.status !== 200) throw new Error("/v1/rls/domains: " + errorText(r));
  const ds = (r.body && r.body.domains) || [];
  $("rls").textContent = ds.length ? ds.map((d) => (typeof d === "string" ? d : d.name || d.domain)).join(", ") : "none";
}

// ---- decisions chart, from limitd_checks_total in /metrics ----

// parseCounters reads limitd_checks_total{policy,result} from Prometheus text.
function parseCounters(text) {
  const values = new Map();
  for (const line of text.split("\n")) {
    if (!line.startsWith("limitd_checks_total{")) continue;
    const close = line.lastIndexOf("}");
    const labels = {};
    for (const m of line.slice(20, close).matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      labels[m[1]] = m[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    const v = parseFloat(line.slice(close + 1));
    if (labels.policy !== undefined && !Number.isNaN(v)) values.set(labels.policy + "\u0000" + labels.result, v);
  }
  return values;
}

async function refreshDecisions() {
  const resp = await fetch("/metrics", { cache: "no-store" });
  if (!resp.ok) throw new Error("/metrics: HTTP " + resp.status);
  const now = Date.now();
  const text = await resp.text();
  refreshLeaseCounters(text);
  const values = parseCounters(text);
  const totals = new Map(); // policy -> {allowed, refused}
  for (const [k, v] of values) {
    const [policy, result] = k.split("\u0000");
    if (result !== "allowed" && result !== "refused") continue;
    const t = totals.get(policy) || { allowed: 0, refused: 0 };
    t[result] = v;
    totals.set(policy, t);
  }
  if (lastCounters) {
    const dt = (now - lastCounters.time) / 1000;
    const rates = new Map();
    for (const [policy, t] of totals) {
      const prev = lastCounters.totals.get(policy) || { allowed: 0, refused: 0 };
      // A counter lower than before means the node restarted: count from 0.
      const d = (a, b) => (a >= b ? a - b : a);
      rates.set(policy, { allowed: d(t.allowed, prev.allowed) / dt, refused: d(t.refused, prev.refused) / dt });
    }
    history.push({ time: now, rates });
    while (history.length && history[0].time < now - HISTORY_MS) history.shift();
  }
  lastCounters = { time: now, totals };
  drawChart(now, totals);
}

function colorOf(policy) {
  if (!colors.has(policy)) colors.set(policy, PALETTE[colors.size % PALETTE.length]);
  return colors.get(policy);
}

// niceMax rounds a maximum up to 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function drawChart(now, totals) {
  const chart = $("chart");
  const W = 800, H = 220, L = 48, R = 10, T = 10, B = 24;
  const policies = Array.from(totals.keys()).sort();
  let max = 0;
  for (const h of history) for (const r of h.rates.values()) max = Math.max(max, r.allowed, r.refused);
  const top = niceMax(max);
  const x = (t) => L + (W - L - R) * (1 - (now - t) / HISTORY_MS);
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const parts = [];
  for (let i = 0; i <= 4; i++) {
    const v = (top * i) / 4;
    parts.push(svg("line", { class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v) }));
    parts.push(svg("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" }, +v.toPrecision(3)));
  }
  for (let m = 0; m <= 5; m++) {
    parts.push(svg("text", { x: x(now - m * 60000), y: H - 6, "text-anchor": "middle" }, m ? "-" + m + " min" : "now"));
  }
  for (const policy of policies) {
    for (const result of ["allowed", "refused"]) {
      const pts = history.filter((h) => h.rates.has(policy)).map((h) => x(h.time).toFixed(1) + "," + y(h.rates.get(policy)[result]).toFixed(1));
      if (pts.length === 0) continue;
      parts.push(svg("polyline", { class: "series" + (result === "refused" ? " dashed" : ""), stroke: colorOf(policy),
        points: pts.join(" "), "data-policy": policy, "data-result": result }));
    }
  }
  chart.replaceChildren(...parts);
  chart.setAttribute("data-samples", history.length);
  chart.setAttribute("data-max-rate", max);
  const last = history.length ? history[history.length - 1].rates : new Map();
  fill($("rates").tBodies[0], policies.map((p) => {
    const r = last.get(p) || { allowed: 0, refused: 0 };
    const sw = el("span", { class: "swatch" });
    sw.style.background = colorOf(p);
    return el("tr", { "data-policy": p }, el("td", {}, sw, p), el("td", { class: "ok" }, r.allowed.toFixed(1)),
      el("td", { class: "bad" }, r.refused.toFixed(1)), el("td", {}, totals.get(p).allowed), el("td", {}, totals.get(p).refused));
  }), "no checks answered yet");
}

// ---- key lookup ----

function keyPath() {
  const key = $("lookup-key").value;
  const policy = $("lookup-policy").value;
  return "/v1/keys/" + encodeURIComponent(key) + "?policy=" + encodeURIComponent(policy);
}

async function peek(ev) {
  ev.preventDefault();
  $("lookup-error").textContent = "";
  const r = await api("GET", keyPath());
  if (r.status !== 200) {
    $("lookup-result").replaceChildren();
    $("lookup-error").textContent = errorText(r);
    return;
  }
  const d = r.body.decision;
  const facts = [["key", r.body.key], ["policy", r.body.policy], ["a request now", d.allowed ? "would be allowed" : "would be refused"],
    ["remaining", d.remaining + " of " + d.limit], ["retry after", d.retry_after_ms < 0 ? "never" : d.retry_after_ms + " ms"],
    ["reset after", d.reset_after_ms + " ms"]];
  $("lookup-result").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

async function resetKey() {
  if (!token) return;
  if (!window.confirm("Forget the state of key \"" + $("lookup-key").value + "\" under " + $("lookup-policy").value + "?")) return;
  const r = await api("DELETE", keyPath());
  $("lookup-error").textContent = r.status === 200 ? "" : errorText(r);
  if (r.status === 200) await peek(new Event("submit"));
}

// ---- plans: GET /v1/plans and GET /v1/prefix-rules (public reads) ----

function windowText(l) {
  if (l.calendar) return l.calendar + (l.timezone ? " (" + l.timezone + ")" : "");
  if (l.algorithm === "concurrency") return "hold " + (l.hold || l.window || "–");
  return l.window || "–";
}

async function refreshPlans() {
  const r = await api("GET", "/v1/plans");
  if (r.status !== 200) throw new Error("/v1/plans: " + errorText(r));
  const plans = (r.body && r.body.plans) || [];
  const def = (r.body && r.body.default) || "";
  const rows = [];
  for (const p of plans) {
    const names = Object.keys(p.limits || {}).sort();
    names.forEach((n, i) => {
      const l = p.limits[n];
      rows.push(el("tr", { "data-plan": p.name, "data-limit": n },
        el("td", {}, i === 0 ? p.name + (p.name === def ? " (default)" : "") : ""), el("td", {}, n),
        el("td", {}, l.algorithm), el("td", {}, l.limit), el("td", {}, windowText(l)), el("td", {}, l.burst || "–"),
        el("td", {}, l.history || "not kept")));
    });
  }
  fill($("plans").tBodies[0], rows, "no plans");
  topChoices.plans = plans.map((p) => p.name);
  syncTopChoices();
  $("default-plan").textContent = def || "none (a key without an assignment or a matching prefix rule has no plan)";
  const rr = await api("GET", "/v1/prefix-rules");
  if (rr.status !== 200) throw new Error("/v1/prefix-rules: " + errorText(rr));
  const rules = (rr.body && rr.body.prefix_rules) || [];
  fill($("prefix-rules").tBodies[0], rules.map((x) => el("tr", { "data-prefix": x.prefix },
    el("td", {}, x.prefix), el("td", {}, x.plan))), "no prefix rules");
}

// ---- top keys: GET /v1/keys/top (admin), four views of one policy or plan ----

// topChoices are what the top keys can show: policies by name, plans as
// "plan/NAME" (no policy or plan name holds a '/', so the two never clash).
const topChoices = { policies: [], plans: [] };

function syncTopChoices() {
  syncOptions($("top-policy"), topChoices.policies.map((n) => [n, n])
    .concat(topChoices.plans.map((n) => ["plan/" + n, "plan " + n])));
}

const TOP_VIEWS = [["5m", "allowed"], ["5m", "refused"], ["1h", "allowed"], ["1h", "refused"]];

// topCount is a sketch's count: exact when error is 0, else at most count
// and at least count - error.
function topCount(k) {
  if (!k) return "–";
  return k.error ? k.count + " ± " + k.error : String(k.count);
}

async function refreshTopKeys() {
  const tbody = $("top-keys").tBodies[0];
  if (!adminView) {
    fill(tbody, [], "the admin token is needed to see top keys");
    return;
  }
  const policy = $("top-policy").value;
  if (!policy) {
    fill(tbody, [], "no policies or plans");
    return;
  }
  const plan = policy.startsWith("plan/") ? policy.slice("plan/".length) : "";
  const query = plan ? "/v1/keys/top?plan=" + encodeURIComponent(plan) : "/v1/keys/top?policy=" + encodeURIComponent(policy);
  const answers = await Promise.all(TOP_VIEWS.map(([w, by]) => api("GET", query + "&window=" + w + "&by=" + by)));
  for (const a of answers) if (a.status !== 200) throw new Error("/v1/keys/top: " + errorText(a));
  if ($("top-policy").value !== policy) return; // another policy or plan was picked meanwhile
  const keys = new Map(); // key -> its entry in each view (or undefined)
  answers.forEach((a, i) => {
    for (const k of a.body.keys || []) {
      if (!keys.has(k.key)) keys.set(k.key, []);
      keys.get(k.key)[i] = k;
    }
  });
  const n = (v) => (v ? v.count : 0);
  const order = Array.from(keys.keys()).sort((a, b) => {
    const x = keys.get(a), y = keys.get(b);
    return n(y[0]) - n(x[0]) || n(y[2]) - n(x[2]) || n(y[1]) - n(x[1]) || n(y[3]) - n(x[3]) || (a < b ? -1 : a > b ? 1 : 0);
  });
  fill(tbody, order.map((k) => el("tr", { "data-key": k }, el("td", {}, k),
    ...TOP_VIEWS.map((view, i) => {
      const v = keys.get(k)[i]; // the views' arrays have holes where a key is not in that view's top
      return el("td", { class: view[1] === "refused" && v ? "bad" : "", "data-view": view.join("-") }, topCount(v));
    }))),
  "no checks of " + (plan ? "plan " + plan : policy) + " in the last hour");
}

// ---- key: its plan (public reads), each limit's use, history and work in flight (admin reads) ----

const SOURCES = { assignment: "assigned to it", prefix_rule: "by a prefix rule", default: "the default plan" };

function keyTables(text) {
  for (const id of ["key-limits", "key-slots", "key-reservations"]) fill($(id).tBodies[0], [], text);
}

function msText(ms) {
  if (ms < 0) return "never";
  return ms < 10000 ? ms + " ms" : (ms / 1000).toFixed(0) + " s";
}

// historyText is a limit's closed windows (the most recent last), as
// "start: used/refused".
function historyText(u) {
  if (!u || u.status !== 200) return u ? errorText(u) : "–";
  if (!u.body.history) return "not kept";
  const closed = (u.body.windows || []).filter((w) => !w.current).slice(-6);
  if (closed.length === 0) return "kept " + u.body.history + ": no closed window yet";
  return closed.map((w) => w.start + ": " + w.used + " used, " + w.refused + " refused").join("; ");
}

// shownKey is what the Key section shows ({key, choice}), read again on
// every poll so that slots and reservations come and go as they are held
// and freed; keySeq drops the answers of a read a newer one replaced.
let shownKey = null;
let keySeq = 0;
let keyBusy = false; // a poll's re-read of the Key section is under way

function showKey(ev) {
  ev.preventDefault();
  shownKey = { key: $("key-name").value, choice: $("key-limit").value };
  return renderKey();
}

async function renderKey() {
  if (!shownKey) return;
  const { key, choice } = shownKey;
  const seq = ++keySeq;
  const current = () => seq === keySeq;
  const k = encodeURIComponent(key);
  const failed = (text) => {
    if (!current()) return;
    $("key-plan").replaceChildren();
    keyTables("–");
    $("key-error").textContent = text;
  };
  const kp = await api("GET", "/v1/keys/" + k + "/plan");
  if (kp.status !== 200) return failed(errorText(kp));
  const plan = kp.body.plan || "";
  const facts = [["Key", key], ["Plan", plan ? plan + " (" + (SOURCES[kp.body.source] || kp.body.source) + ")" :
    "none: no assignment, prefix rule or default plan covers this key"]];
  let override = "none";
  if (kp.body.overridden) {
    const o = await api("GET", "/v1/keys/" + k + "/override");
    if (o.status === 200) {
      const ls = Object.entries(o.body.limits || {}).map(([n, l]) => n + ": limit " + (l.limit || "as planned") + (l.burst ? ", burst " + l.burst : ""));
      override = ls.join("; ") + (o.body.expires ? ", until " + o.body.expires : ", with no end");
    } else {
      override = errorText(o);
    }
  }
  facts.push(["Override", override]);

  // The limits to read: the key's plan's, or the policy picked.
  let refs = [];
  if (choice !== "") {
    refs = [{ name: "policy " + choice, list: "policy=" + encodeURIComponent(choice), read: "policy=" + encodeURIComponent(choice) }];
  } else if (plan) {
    const p = await api("GET", "/v1/plans/" + encodeURIComponent(plan));
    if (p.status !== 200) return failed("/v1/plans/" + plan + ": " + errorText(p));
    refs = Object.keys(p.body.limits || {}).sort().map((n) => ({ name: n,
      list: "plan=" + encodeURIComponent(plan) + "&plan_limit=" + encodeURIComponent(n), read: "limit=" + encodeURIComponent(n) }));
  }
  let empty = "";
  const limits = [], slots = [], reservations = [];
  if (refs.length === 0) empty = "the key has no plan: pick a policy to see it under one";
  else if (!adminView) empty = "the admin token is needed to read a key's use";
  for (const ref of empty ? [] : refs) {
    const [ls, us, inf] = await Promise.all([
      api("GET", "/v1/keys?" + ref.list + "&prefix=" + k + "&limit=1"),
      api("GET", "/v1/usage?key=" + k + "&" + ref.read),
      api("GET", "/v1/keys/" + k + "/inflight?" + ref.read)]);
    if (ls.status !== 200) {
      limits.push(el("tr", { "data-limit": ref.name }, el("td", {}, ref.name), el("td", { colspan: 4, class: "error" }, errorText(ls))));
      continue;
    }
    // The listing starts at the prefix: its first key is this key when it has state.
    const u = ((ls.body.keys || [])[0] || {}).key === key ? ls.body.keys[0] : null;
    limits.push(el("tr", { "data-limit": ref.name }, el("td", {}, ref.name),
      el("td", {}, u ? u.used : "0 (no state)"), el("td", {}, u ? u.remaining : "all"),
      el("td", {}, u ? msText(u.reset_after_ms) : "–"), el("td", { class: "history" }, historyText(us))));
    if (inf.status !== 200) {
      const text = inf.status === 404 && !(inf.body && inf.body.error && inf.body.error.field) ? "this node has no in-flight read" : errorText(inf);
      slots.push(el("tr", { "data-limit": ref.name }, el("td", {}, ref.name), el("td", { colspan: 2, class: "muted" }, text)));
      continue;
    }
    // expires_in_ms is counted from the read's leader time, not this browser's clock.
    const expires = (x) => x.expires + (typeof x.expires_in_ms === "number" ? " (in " + msText(x.expires_in_ms) + ")" : "");
    const listed = inf.body.slots || [];
    for (const s of listed) {
      slots.push(el("tr", { "data-limit": ref.name, "data-slot": s.slot }, el("td", {}, ref.name), el("td", {}, s.slot), el("td", {}, expires(s))));
    }
    if (inf.body.slots_held > listed.length) {
      slots.push(el("tr", { class: "more" }, el("td", {}, ref.name), el("td", { colspan: 2, class: "muted" }, "and " + (inf.body.slots_held - listed.length) + " more held")));
    }
    for (const r of inf.body.reservations || []) {
      reservations.push(el("tr", { "data-limit": ref.name, "data-reservation": r.reservation }, el("td", {}, ref.name),
        el("td", {}, r.reservation), el("td", {}, r.cost), el("td", {}, expires(r))));
    }
    if (inf.body.more_reservations) {
      reservations.push(el("tr", { class: "more" }, el("td", {}, ref.name), el("td", { colspan: 3, class: "muted" }, "and more open than listed")));
    }
  }
  if (!current()) return;
  $("key-error").textContent = "";
  $("key-plan").replaceChildren(...facts.flatMap(([a, b]) => [el("dt", {}, a), el("dd", { "data-fact": a.toLowerCase() }, b)]));
  if (empty) {
    keyTables(empty);
    return;
  }
  fill($("key-limits").tBodies[0], limits, "–");
  fill($("key-slots").tBodies[0], slots, "none held");
  fill($("key-reservations").tBodies[0], reservations, "none open");
}

// ---- playground ----

function simAlgorithms() {
  $("sim-algorithms").replaceChildren(...ALGORITHMS.map((a) =>
    el("label", {}, el("input", { type: "checkbox", value: a, checked: "", "data-algorithm": a }), " " + a)));
}

async function runSimulation(ev) {
  ev.preventDefault();
  $("sim-error").textContent = "";
  const body = {
    trace: $("sim-trace").value,
    algorithms: Array.from(document.querySelectorAll("#sim-algorithms input:checked"), (i) => i.value),
    limit: Number($("sim-limit").value),
    window: $("sim-window").value.trim(),
    count_refused: $("sim-count-refused").checked,
  };
  if ($("sim-burst").value !== "") body.burst = Number($("sim-burst").value);
  const r = await api("POST", "/v1/simulate", body);
  if (r.status !== 200) {
    $("sim-results").replaceChildren();
    $("sim-error").textContent = errorText(r);
    return;
  }
  drawTimelines(r.body);
}

// drawTimelines shows each run as stacked bars over time: admitted requests
// in green from the axis up, refused ones in red above them.
function drawTimelines(res) {
  const times = res.runs[0].decisions.map((d) => Number(d.t));
  const t0 = times[0], t1 = times[times.length - 1];
  const W = 800, H = 70, L = 4, R = 4, B = 16;
  const columns = 100; // time buckets across the trace
  const span = t1 - t0;
  const col = (t) => (span === 0 ? 0 : Math.min(columns - 1, Math.floor(((t - t0) / span) * columns)));
  let peak = 1;
  const binned = res.runs.map((run) => {
    const bins = Array.from({ length: columns }, () => ({ allowed: 0, refused: 0, t: null }));
    run.decisions.forEach((d) => {
      if (d.cost === 0) return; // a peek admits and refuses nothing
      const b = bins[col(Number(d.t))];
      b[d.allowed ? "allowed" : "refused"]++;
      if (b.t === null) b.t = d.t;
    });
    for (const b of bins) peak = Math.max(peak, b.allowed + b.refused);
    return bins;
  });
  const bw = (W - L - R) / columns;
  const rows = res.runs.map((run, i) => {
    const g = svg("svg", { viewBox: "0 0 " + W + " " + H, class: "timeline", "data-algorithm": run.algorithm });
    binned[i].forEach((b, c) => {
      const x = L + c * bw, h = (n) => ((H - B - 4) * n) / peak;
      if (b.allowed) g.append(svg("rect", { class: "allowed", x: x + 0.5, width: Math.max(1, bw - 1), y: H - B - h(b.allowed), height: h(b.allowed) }));
      if (b.refused) g.append(svg("rect", { class: "refused", x: x + 0.5, width: Math.max(1, bw - 1), y: H - B - h(b.allowed) - h(b.refused), height: h(b.refused) }));
    });
    g.append(svg("line", { class: "grid", x1: L, x2: W - R, y1: H - B, y2: H - B }));
    g.append(svg("text", { x: L, y: H - 3 }, t0 + " s"));
    g.append(svg("text", { x: W - R, y: H - 3, "text-anchor": "end" }, t1 + " s"));
    return el("div", { class: "sim-run", "data-algorithm": run.algorithm, "data-admitted": run.admitted, "data-refused": run.refused },
      el("div", {}, el("div", { class: "name" }, run.algorithm),
        el("div", { class: "counts" }, el("span", { class: "ok" }, run.admitted + " admitted"), ", ", el("span", { class: "bad" }, run.refused + " refused")),
        el("div", { class: "muted counts" }, run.spec.replace(/^\S+ /, ""))),
      g);
  });
  let disagree = 0;
  for (let j = 0; j < times.length; j++) {
    if (res.runs.some((run) => run.decisions[j].allowed !== res.runs[0].decisions[j].allowed)) disagree++;
  }
  const summary = el("p", { class: "muted", id: "sim-summary" }, res.requests + " requests, " + disagree + " decided differently by the algorithms shown.");
  $("sim-results").replaceChildren(summary, ...rows);
}

function example() {
  const lines = ["# ten requests at t = 59 s, ten at t = 60 s: one fixed-window boundary apart"];
  for (const t of [59, 60]) for (let i = 0; i < 10; i++) lines.push(t + " client");
  $("sim-trace").value = lines.join("\n") + "\n";
  $("sim-limit").value = "10";
  $("sim-window").value = "60s";
}

// ---- token and polling ----

function setStatus(text, bad) {
  $("status").textContent = text;
  $("status").className = bad ? "error" : "muted";
}

function setToken(t) {
  token = t;
  $("token").value = "";
  $("mode").textContent = token ? "admin" : "read-only";
  $("mode").className = token ? "badge admin" : "badge";
  $("lookup-reset").hidden = !token;
  poll();
}

let polling = false;
async function poll() {
  if (polling) return;
  polling = true;
  try {
    await Promise.all([refreshCluster(), refreshPolicies(), refreshRLS(), refreshDecisions(), refreshPlans()]);
    // After the cluster's answer: it tells whether admin reads will be served.
    await refreshTopKeys();
    // Not awaited: the key's plan is read through the log, and a cluster
    // without a leader must not hold the status line back; one re-read at
    // a time.
    if (!keyBusy) {
      keyBusy = true;
      renderKey().catch((e) => { $("key-error").textContent = e.message; }).finally(() => { keyBusy = false; });
    }
    if (tokenRejected) setStatus("The admin token was refused: showing the public view. Forget it or enter the right one.", true);
    else setStatus("Updated " + new Date().toLocaleTimeString() + ".");
  } catch (e) {
    setStatus("Cannot reach this node: " + e.message, true);
  } finally {
    polling = false;
  }
}

function start() {
  simAlgorithms();
  example();
  $("token-form").addEventListener("submit", (ev) => { ev.preventDefault(); setToken($("token").value); });
  $("token-forget").addEventListener("click", () => setToken(""));
  $("lookup-form").addEventListener("submit", peek);
  $("lookup-reset").addEventListener("click", resetKey);
  $("top-policy").addEventListener("change", () => refreshTopKeys().catch((e) => setStatus("Top keys: " + e.message, true)));
  $("key-form").addEventListener("submit", (ev) => showKey(ev).catch((e) => { $("key-error").textContent = e.message; }));
  $("sim-form").addEventListener("submit", runSimulation);
  $("sim-example").addEventListener("click", example);
  poll();
  setInterval(poll, POLL_MS);
}

document.addEventListener("DOMContentLoaded", start);
