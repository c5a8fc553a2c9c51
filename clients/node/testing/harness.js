'use strict';
// Test harness: real limitd processes on free loopback ports, and a
// fault-injecting proxy. The limitd binary is $LIMITD_BIN, or built once
// per test process with `go build ./cmd/limitd` from the repository root.

const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const https = require('node:https');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const REPO = path.resolve(__dirname, '..', '..', '..');
const IN_CI = ['1', 'true', 'yes'].includes(String(process.env.CI || '').toLowerCase());
const TOKEN = 'test-admin-token';

let bin = null;
function limitdBin() {
  if (bin) return bin;
  if (process.env.LIMITD_BIN) {
    fs.accessSync(process.env.LIMITD_BIN, fs.constants.X_OK);
    bin = process.env.LIMITD_BIN;
    return bin;
  }
  // Once per test process (node --test runs each file in its own): the Go
  // build cache makes the later builds a link step.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'limitd-nodetest-bin-'));
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  const out = path.join(dir, 'limitd');
  execFileSync('go', ['build', '-o', out, './cmd/limitd'], { cwd: REPO, stdio: 'inherit' });
  bin = out;
  return bin;
}

function hasTool(name) {
  return (process.env.PATH || '').split(path.delimiter).some((d) => {
    try { fs.accessSync(path.join(d, name), fs.constants.X_OK); return true; } catch (_) { return false; }
  });
}

// n distinct free loopback ports, held open together then released; below
// the kernel's ephemeral range so that no outgoing connection takes one.
async function freePorts(n) {
  const servers = [];
  const ports = [];
  try {
    for (let i = 0; i < n; i++) {
      let srv = null;
      for (let t = 0; t < 50 && !srv; t++) {
        const port = 20000 + Math.floor(Math.random() * 12000);
        srv = await new Promise((resolve) => {
          const s = net.createServer();
          s.once('error', () => resolve(null));
          s.listen(port, '127.0.0.1', () => resolve(s));
        });
      }
      if (!srv) throw new Error('no free loopback port');
      servers.push(srv);
      ports.push(srv.address().port);
    }
  } finally {
    await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  }
  return ports;
}

function get(url, ca) {
  return new Promise((resolve, reject) => {
    const mod = url.startsWith('https:') ? https : http;
    const req = mod.get(url, { agent: false, timeout: 2000, ca }, (res) => {
      let data = '';
      res.on('data', (c) => { data += c; });
      res.on('end', () => resolve({ status: res.statusCode, data }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}

class Node {
  constructor(id, httpPort, raftPort, root, { join, token, extra = [], scheme = 'http' } = {}) {
    this.id = id;
    this.httpAddr = `127.0.0.1:${httpPort}`;
    this.raftAddr = `127.0.0.1:${raftPort}`;
    this.dataDir = path.join(root, id);
    this.logPath = path.join(root, id + '.log');
    Object.assign(this, { join, token, extra, scheme });
    this.proc = null;
    this.exited = null;
  }

  get url() { return `${this.scheme}://${this.httpAddr}`; }

  start() {
    const args = ['serve', '--node-id', this.id, '--http-addr', this.httpAddr, '--raft-addr', this.raftAddr,
      '--data-dir', this.dataDir, '--log-level', 'warn'];
    if (this.join) args.push('--join', this.join);
    if (this.token) args.push('--admin-token', this.token);
    args.push(...this.extra);
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('LIMITD_')));
    const log = fs.openSync(this.logPath, 'w');
    this.proc = spawn(limitdBin(), args, { env, stdio: ['ignore', log, log] });
    fs.closeSync(log);
    this.exited = new Promise((r) => this.proc.once('exit', r));
  }

  running() { return this.proc !== null && this.proc.exitCode === null && this.proc.signalCode === null; }

  async waitReady(timeoutMs = 60000, ca) {
    const deadline = Date.now() + timeoutMs;
    let last;
    while (Date.now() < deadline) {
      if (!this.running()) throw new Error(`${this.id} exited during start-up:\n${this.logs()}`);
      try {
        const r = await get(this.url + '/readyz', ca);
        if (r.status === 200) return;
        last = `readyz ${r.status}`;
      } catch (e) {
        last = e.message;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`${this.id} not ready in ${timeoutMs} ms (${last}):\n${this.logs()}`);
  }

  async stop(signal = 'SIGTERM') {
    if (!this.running()) return;
    this.proc.kill(signal);
    const t = setTimeout(() => this.proc.kill('SIGKILL'), 10000);
    await this.exited;
    clearTimeout(t);
  }

  kill() { return this.stop('SIGKILL'); }

  logs() {
    try { return fs.readFileSync(this.logPath, 'utf8').slice(-4000); } catch (_) { return ''; }
  }
}

// n limitd processes in a temp dir: the first bootstraps, the others join it.
class Cluster {
  static async start(n = 1, { token, extra = [], scheme = 'http', ca } = {}) {
    const c = new Cluster();
    c.root = fs.mkdtempSync(path.join(os.tmpdir(), 'limitd-nodetest-'));
    const ports = await freePorts(2 * n);
    c.nodes = [];
    for (let i = 0; i < n; i++) {
      c.nodes.push(new Node(`n${i + 1}`, ports[2 * i], ports[2 * i + 1], c.root,
        { join: i > 0 ? c.nodes[0].url : undefined, token, extra, scheme }));
    }
    try {
      c.nodes[0].start();
      await c.nodes[0].waitReady(60000, ca);
      for (const nd of c.nodes.slice(1)) nd.start();
      for (const nd of c.nodes) await nd.waitReady(60000, ca);
      if (n > 1) await c.waitMembers(n);
    } catch (e) {
      await c.stop();
      throw e;
    }
    return c;
  }

  async waitMembers(n, timeoutMs = 60000) {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      try {
        const r = await get(this.nodes[0].url + '/v1/cluster');
        if ((JSON.parse(r.data).members || []).length === n) return;
      } catch (_) { /* not yet */ }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`cluster did not reach ${n} members`);
  }

  async stop() {
    await Promise.all(this.nodes.map((nd) => nd.stop()));
    fs.rmSync(this.root, { recursive: true, force: true });
  }
}

// An HTTP proxy in front of one node that can, per request, drop the
// connection after forwarding (the answer is lost), answer 503
// outcome_unknown after forwarding, or 503 unavailable without forwarding.
// It rewrites the node's address in /v1/cluster answers to its own, so a
// leader-aware client keeps going through it. seen records every request.
class FaultProxy {
  static async start(upstream) {
    const p = new FaultProxy();
    p.upstream = upstream;
    p.faults = [];
    p.seen = [];
    p.server = http.createServer((req, res) => p._handle(req, res));
    p.server.keepAliveTimeout = 60000;
    await new Promise((r) => p.server.listen(0, '127.0.0.1', r));
    p.addr = `127.0.0.1:${p.server.address().port}`;
    return p;
  }

  inject(prefix, action) { this.faults.push([prefix, action]); }

  bodies(prefix) {
    return this.seen.filter((s) => s.path.startsWith(prefix) && s.body).map((s) => JSON.parse(s.body));
  }

  _handle(req, res) {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      this.seen.push({ method: req.method, path: req.url, body: body.length ? body.toString() : null });
      let action = null;
      const i = this.faults.findIndex(([prefix]) => req.url.startsWith(prefix));
      if (i >= 0) {
        action = this.faults[i][1];
        this.faults.splice(i, 1);
      }
      const reply = (status, data, headers = {}) => {
        res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data), ...headers });
        res.end(data);
      };
      if (action === 'unavailable') {
        reply(503, '{"error":{"code":"unavailable","message":"injected: no leader"}}', { 'Retry-After': '1' });
        return;
      }
      const [host, port] = [this.upstream.slice(0, this.upstream.lastIndexOf(':')), Number(this.upstream.slice(this.upstream.lastIndexOf(':') + 1))];
      const headers = { ...req.headers };
      delete headers.host;
      delete headers.connection;
      const up = http.request({ host, port, method: req.method, path: req.url, headers, agent: false }, (ures) => {
        const uc = [];
        ures.on('data', (c) => uc.push(c));
        ures.on('end', () => {
          let data = Buffer.concat(uc).toString();
          if (action === 'drop') {
            req.socket.destroy();
            return;
          }
          if (action === 'outcome_unknown') {
            reply(503, '{"error":{"code":"outcome_unknown","message":"injected"}}', { 'Retry-After': '1' });
            return;
          }
          if (req.url.startsWith('/v1/cluster')) data = data.split(this.upstream).join(this.addr);
          const extra = {};
          for (const k of ['retry-after', 'limitd-leader', 'www-authenticate']) if (ures.headers[k]) extra[k] = ures.headers[k];
          reply(ures.statusCode, data, extra);
        });
      });
      up.on('error', (e) => reply(502, JSON.stringify({ error: { code: 'internal', message: String(e) } })));
      up.end(body);
    });
  }

  close() {
    this.server.closeAllConnections?.();
    return new Promise((r) => this.server.close(r));
  }
}

module.exports = { REPO, IN_CI, TOKEN, limitdBin, hasTool, freePorts, Node, Cluster, FaultProxy };
