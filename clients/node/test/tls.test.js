'use strict';
// HTTPS: a node serving TLS, verified with a CA file.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const h = require('../testing/harness.js');
const limitd = require('../index.js');

const haveOpenssl = h.hasTool('openssl');
if (!haveOpenssl && h.IN_CI) throw new Error('openssl is required with CI set');
const skip = haveOpenssl ? false : 'openssl is not installed';

let cluster;
let certs;
const limit = { algorithm: 'fixed_window', limit: 2, window: '1m' };

before(async () => {
  if (skip) return;
  certs = fs.mkdtempSync(path.join(os.tmpdir(), 'limitd-nodetest-certs-'));
  execFileSync('bash', [path.join(h.REPO, 'scripts', 'certs.sh'), certs, 'n1'], { stdio: 'ignore' });
  cluster = await h.Cluster.start(1, {
    scheme: 'https',
    ca: fs.readFileSync(path.join(certs, 'ca.pem')),
    extra: ['--tls-cert', path.join(certs, 'n1.pem'), '--tls-key', path.join(certs, 'n1-key.pem')],
  });
});

after(async () => {
  if (cluster) await cluster.stop();
  if (certs) fs.rmSync(certs, { recursive: true, force: true });
});

test('https with a CA file', { skip }, async () => {
  const c = new limitd.Client(['https://' + cluster.nodes[0].httpAddr], { caFile: path.join(certs, 'ca.pem') });
  try {
    const d = await c.check({ key: 'k', limit });
    assert.deepEqual([d.allowed, d.remaining], [true, 1]);
  } finally {
    c.close();
  }
});

test('an untrusted certificate is a ConfigError, not hidden by the fail mode', { skip }, async () => {
  const c = new limitd.Client(['https://' + cluster.nodes[0].httpAddr], { timeout: 10000, failMode: 'open' });
  const t0 = Date.now();
  try {
    await assert.rejects(c.check({ key: 'k', limit }), (e) => {
      assert.ok(e instanceof limitd.ConfigError, String(e));
      assert.equal(e.kind, 'unknown_authority');
      assert.ok(!(e instanceof limitd.Unavailable));
      return true;
    });
    assert.ok(Date.now() - t0 < 2000);
  } finally {
    c.close();
  }
});

test('plain HTTP to an HTTPS node is a ConfigError', { skip }, async () => {
  const c = new limitd.Client(['http://' + cluster.nodes[0].httpAddr], { timeout: 10000 });
  try {
    await assert.rejects(c.check({ key: 'k', limit }), (e) => e instanceof limitd.ConfigError && e.kind === 'tls_required');
  } finally {
    c.close();
  }
});
