'use strict';
// The Node.js client against one real limitd node (with an admin token).

const { test, describe, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const h = require('../testing/harness.js');
const limitd = require('../index.js');

const uniq = (p) => `${p}-${crypto.randomBytes(5).toString('hex')}`;
const deadAddr = async () => `127.0.0.1:${(await h.freePorts(1))[0]}`;

let cluster;
let url;
let c;

before(async () => {
  cluster = await h.Cluster.start(1, { token: h.TOKEN });
  url = cluster.nodes[0].url;
  c = new limitd.Client([url], { token: h.TOKEN });
});

after(async () => {
  if (c) c.close();
  if (cluster) await cluster.stop();
});

async function policy(limit = 3, window = '60s', algorithm = 'sliding_window', extra = {}) {
  const name = uniq('p');
  await c.putPolicy({ name, algorithm, limit, window, ...extra });
  return name;
}

async function rejectsWith(promise, Cls, check) {
  let err;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof Cls, `want ${Cls.name}, got ${err && err.stack}`);
  if (check) check(err);
  return err;
}

describe('checks', () => {
  test('allowed, then refused with retryAfterMs; the leader is learned', async () => {
    const p = await policy(3);
    const key = uniq('user');
    for (const want of [2, 1, 0]) {
      const d = await c.check({ key, policy: p });
      assert.equal(d.allowed, true);
      assert.deepEqual([d.limit, d.remaining, d.retryAfterMs], [3, want, 0]);
      assert.ok(d.resetAfterMs > 0);
    }
    const d = await c.check({ key, policy: p });
    assert.equal(d.allowed, false);
    assert.equal(d.degraded, false);
    assert.equal(d.remaining, 0);
    assert.ok(d.retryAfterMs > 0 && d.retryAfterMs <= 120000, `retryAfterMs ${d.retryAfterMs}`);
    assert.equal(c.target, cluster.nodes[0].httpAddr);
  });

  test('inline limits and NEVER', async () => {
    const d = await c.check({ key: uniq('ip'), limit: { algorithm: 'token_bucket', limit: 5, window: '1s', burst: 10 }, cost: 3 });
    assert.deepEqual([d.allowed, d.limit, d.remaining], [true, 5, 7]);
    const n = await c.check({ key: uniq('ip'), limit: { algorithm: 'fixed_window', limit: 2, window: '1m' }, cost: 3 });
    assert.equal(n.allowed, false);
    assert.equal(n.retryAfterMs, limitd.NEVER);
  });

  test('checkAll is atomic: a refusal consumes nothing', async () => {
    const small = await policy(1);
    const big = await policy(100);
    const key = uniq('user');
    let r = await c.checkAll([{ key, policy: small }, { key, policy: big }]);
    assert.equal(r.allowed, true);
    assert.deepEqual(r.results.map((d) => d.remaining), [0, 99]);
    r = await c.checkAll([{ key, policy: small }, { key, policy: big }]);
    assert.equal(r.allowed, false);
    assert.equal(r.results[0].allowed, false);
    assert.ok(r.results[0].retryAfterMs > 0);
    assert.equal((await c.peek(key, { policy: big })).remaining, 99);
  });

  test('checkAll replays its request id', async () => {
    const p = await policy(10);
    const key = uniq('user');
    const requestId = uniq('all');
    const a = await c.checkAll([{ key, policy: p }, { key: key + '-2', policy: p }], { requestId });
    const b = await c.checkAll([{ key, policy: p }, { key: key + '-2', policy: p }], { requestId });
    assert.equal(a.replayed, false);
    assert.equal(b.replayed, true);
    assert.equal((await c.peek(key, { policy: p })).remaining, 9);
  });

  test('batch: every entry its decision or its own error', async () => {
    const p = await policy(3);
    const res = await c.batch([
      { key: uniq('a'), policy: p },
      { key: '', policy: p },
      { key: uniq('b'), policy: 'nope-' + p },
      { key: uniq('c'), limit: { algorithm: 'fixed_window', limit: 1, window: '60' } },
    ]);
    assert.equal(res.length, 4);
    assert.equal(res[0].error, null);
    assert.equal(res[0].decision.remaining, 2);
    assert.ok(res[1].error instanceof limitd.InvalidArgument);
    assert.deepEqual([res[1].error.code, res[1].error.field], ['invalid_argument', 'key']);
    assert.ok(res[2].error instanceof limitd.NotFound);
    assert.deepEqual([res[2].error.code, res[2].error.field], ['not_found', 'policy']);
    assert.equal(res[3].error.field, 'limit.window');
  });

  test('typed errors carry code, field and message', async () => {
    await rejectsWith(c.check({ key: uniq('k'), limit: { algorithm: 'sliding_window', limit: 3, window: '60' } }), limitd.InvalidArgument, (e) => {
      assert.deepEqual([e.status, e.code, e.field], [400, 'invalid_argument', 'limit.window']);
      assert.match(e.serverMessage, /invalid duration/);
      assert.match(e.message, /limit\.window/);
      assert.ok(e instanceof limitd.LimitdError && e instanceof Error);
      assert.ok(!(e instanceof limitd.Unavailable));
    });
    await rejectsWith(c.check({ key: '', policy: 'x' }), limitd.InvalidArgument, (e) => assert.equal(e.field, 'key'));
    await rejectsWith(c.check({ key: uniq('k'), policy: uniq('missing') }), limitd.NotFound, (e) => assert.deepEqual([e.status, e.field], [404, 'policy']));
    await rejectsWith(c.check({ key: uniq('k'), policy: 'x', cost: -1 }), limitd.InvalidArgument, (e) => assert.equal(e.field, 'cost'));
  });

  test('a request id is replayed and consumes nothing; reused for another key it conflicts', async () => {
    const p = await policy(5);
    const key = uniq('user');
    const requestId = uniq('req');
    const a = await c.check({ key, policy: p, requestId });
    const b = await c.check({ key, policy: p, requestId });
    assert.equal(a.replayed, false);
    assert.equal(b.replayed, true);
    assert.deepEqual([a.remaining, b.remaining], [4, 4]);
    assert.equal((await c.peek(key, { policy: p })).remaining, 4);
    await rejectsWith(c.check({ key: key + '-other', policy: p, requestId }), limitd.Conflict, (e) => assert.deepEqual([e.status, e.field], [409, 'key']));
  });

  test('generated request ids are unique; concurrent checks share one client', async () => {
    const p = await policy(1000, '1h', 'fixed_window');
    const key = uniq('user');
    const ds = await Promise.all(Array.from({ length: 100 }, () => c.check({ key, policy: p })));
    assert.ok(ds.every((d) => d.allowed && !d.replayed));
    assert.equal((await c.peek(key, { policy: p })).remaining, 900);
  });

  test('peek and reset, by policy and by inline limit', async () => {
    const p = await policy(3);
    const key = 'user/with ?odd% chars-' + uniq('k');
    await c.check({ key, policy: p, cost: 2 });
    const d = await c.peek(key, { policy: p });
    assert.deepEqual([d.allowed, d.remaining], [true, 1]);
    await c.reset(key, { policy: p });
    assert.equal((await c.peek(key, { policy: p })).remaining, 3);
    const limit = { algorithm: 'fixed_window', limit: 4, window: '1m' };
    await c.check({ key, limit });
    assert.equal((await c.peek(key, { limit })).remaining, 3);
    await c.reset(key, { limit });
    assert.equal((await c.peek(key, { limit })).remaining, 4);
  });
});

describe('policies and the admin token', () => {
  test('put, get, list, delete', async () => {
    const name = uniq('crud');
    const got = await c.putPolicy({ name, algorithm: 'token_bucket', limit: 10, window: '60s', burst: 20 });
    assert.deepEqual([got.name, got.window, got.burst, got.local_refusals], [name, '1m', 20, true]);
    assert.deepEqual(await c.getPolicy(name), got);
    assert.ok((await c.listPolicies()).some((p) => p.name === name));
    assert.equal((await c.putPolicy({ ...got, limit: 11 })).limit, 11);
    await c.deletePolicy(name);
    await rejectsWith(c.getPolicy(name), limitd.NotFound);
    await rejectsWith(c.deletePolicy(name), limitd.NotFound);
    await rejectsWith(c.putPolicy({ name, algorithm: 'sliding_window', limit: 1, window: '60' }), limitd.InvalidArgument, (e) => assert.equal(e.field, 'window'));
  });

  test('admin calls need the token (401 without)', async () => {
    const anon = new limitd.Client([url]);
    const wrong = new limitd.Client([url], { token: 'wrong' });
    try {
      await rejectsWith(anon.putPolicy({ name: uniq('x'), algorithm: 'fixed_window', limit: 1, window: '1s' }), limitd.Unauthenticated,
        (e) => assert.deepEqual([e.status, e.code], [401, 'unauthenticated']));
      const p = await policy();
      await rejectsWith(wrong.reset('k', { policy: p }), limitd.Unauthenticated);
      await rejectsWith(wrong.deletePolicy(p), limitd.Unauthenticated);
      assert.equal((await anon.check({ key: uniq('k'), policy: p })).allowed, true);
      assert.equal((await anon.getPolicy(p)).name, p);
      assert.equal((await c.cluster()).node_id, 'n1');
      assert.equal((await anon.cluster()).node_id, undefined);
    } finally {
      anon.close();
      wrong.close();
    }
  });
});

describe('failover and fail modes', () => {
  test('the first address is dead: the next one answers', async () => {
    const f = new limitd.Client([await deadAddr(), url], { token: h.TOKEN });
    try {
      const p = await policy();
      const t0 = Date.now();
      assert.equal((await f.check({ key: uniq('k'), policy: p })).allowed, true);
      assert.ok(Date.now() - t0 < 2000);
      assert.equal(f.target, cluster.nodes[0].httpAddr);
    } finally {
      f.close();
    }
  });

  async function runMode(failMode, fn) {
    const f = new limitd.Client(['http://' + await deadAddr(), await deadAddr()], { timeout: 10000, failMode });
    const t0 = Date.now();
    try {
      return await (fn ? fn(f) : f.check({ key: 'k', policy: 'p' }));
    } finally {
      const took = Date.now() - t0;
      f.close();
      assert.ok(took < 2000, `fail-fast took ${took} ms`);
    }
  }

  test('fail open answers quickly, degraded', async () => {
    const d = await runMode('open');
    assert.deepEqual([d.allowed, d.degraded], [true, true]);
  });

  test('once every node refused, the next calls give up after one round', async () => {
    const f = new limitd.Client([await deadAddr(), await deadAddr()], { timeout: 10000, failMode: 'open' });
    try {
      const t0 = Date.now();
      assert.equal((await f.check({ key: 'k', policy: 'p' })).degraded, true);
      assert.ok(Date.now() - t0 >= limitd.DEFAULT_FAIL_FAST);
      // One round over the two nodes is at most one retry (two attempts);
      // waiting out failFast again would take several backoffs. Retries are
      // counted, not timed: a loaded machine slows both alike.
      for (let i = 0; i < 3; i++) {
        const r0 = f.stats.retries;
        assert.equal((await f.check({ key: 'k', policy: 'p' })).degraded, true);
        assert.ok(f.stats.retries - r0 <= 2, `${f.stats.retries - r0} retries once down: more than one round`);
      }
      assert.equal(f.stats.failedOpen, 4);
    } finally {
      f.close();
    }
  });

  test('fail closed answers quickly, degraded', async () => {
    const d = await runMode('closed');
    assert.deepEqual([d.allowed, d.degraded, d.retryAfterMs], [false, true, 1000]);
  });

  test('fail error throws Unavailable quickly (not OutcomeUnknown: nothing was sent)', async () => {
    await rejectsWith(runMode('error'), limitd.Unavailable, (e) => {
      assert.ok(!(e instanceof limitd.OutcomeUnknown));
      assert.equal(e.code, 'unavailable');
    });
  });

  test('checkAll fails open too', async () => {
    const r = await runMode('open', (f) => f.checkAll([{ key: 'a', policy: 'p' }, { key: 'b', policy: 'p' }]));
    assert.deepEqual([r.allowed, r.degraded, r.results.length], [true, true, 2]);
  });

  test('a bad fail mode or address is refused', () => {
    assert.throws(() => new limitd.Client(['127.0.0.1:1'], { failMode: 'sideways' }), TypeError);
    assert.throws(() => new limitd.Client(['ftp://x:1']), TypeError);
    assert.throws(() => new limitd.Client([]), TypeError);
  });
});

describe('retries with the same request id (through a fault-injecting proxy)', () => {
  let proxy;
  let pc;
  let p;
  before(async () => {
    proxy = await h.FaultProxy.start(cluster.nodes[0].httpAddr);
    pc = new limitd.Client(['http://' + proxy.addr], { token: h.TOKEN });
    p = uniq('rp');
    await pc.putPolicy({ name: p, algorithm: 'fixed_window', limit: 10, window: '1h' });
  });
  after(async () => {
    pc.close();
    await proxy.close();
  });
  const ids = () => proxy.bodies('/v1/check').map((b) => b.request_id);

  test('a connection lost after sending is retried with the same id: counted once', async () => {
    proxy.seen.length = 0;
    const key = uniq('k');
    proxy.inject('/v1/check', 'drop');
    const d = await pc.check({ key, policy: p });
    assert.deepEqual([d.allowed, d.replayed, d.remaining], [true, true, 9]);
    const got = ids();
    assert.equal(got.length, 2);
    assert.equal(got[0], got[1]);
    assert.equal((await pc.peek(key, { policy: p })).remaining, 9);
  });

  test('503 outcome_unknown is retried with the same id', async () => {
    proxy.seen.length = 0;
    const key = uniq('k');
    proxy.inject('/v1/check', 'outcome_unknown');
    proxy.inject('/v1/check', 'outcome_unknown');
    const d = await pc.check({ key, policy: p, cost: 2 });
    assert.deepEqual([d.replayed, d.remaining], [true, 8]);
    assert.equal(ids().length, 3);
    assert.equal(new Set(ids()).size, 1);
    assert.equal((await pc.peek(key, { policy: p })).remaining, 8);
  });

  test('503 unavailable is retried', async () => {
    proxy.seen.length = 0;
    const key = uniq('k');
    proxy.inject('/v1/check', 'unavailable');
    const d = await pc.check({ key, policy: p });
    assert.deepEqual([d.replayed, d.remaining], [false, 9]);
    assert.equal(new Set(ids()).size, 1);
  });

  test('batch and checkAll are retried with the same ids', async () => {
    proxy.seen.length = 0;
    const key = uniq('k');
    proxy.inject('/v1/check/batch', 'drop');
    const res = await pc.batch([{ key, policy: p }, { key, policy: p }]);
    assert.ok(res.every((r) => r.decision.replayed));
    const bodies = proxy.bodies('/v1/check/batch');
    assert.deepEqual(bodies[0], bodies[1]);
    proxy.inject('/v1/check/all', 'outcome_unknown');
    const r = await pc.checkAll([{ key, policy: p }]);
    assert.equal(r.replayed, true);
    assert.equal((await pc.peek(key, { policy: p })).remaining, 7);
  });

  test('the deadline ends retries with OutcomeUnknown', async () => {
    proxy.seen.length = 0;
    for (let i = 0; i < 100; i++) proxy.inject('/v1/check', 'outcome_unknown');
    const t0 = Date.now();
    await rejectsWith(pc.check({ key: uniq('k'), policy: p }, { timeout: 800 }), limitd.OutcomeUnknown, (e) => assert.ok(e instanceof limitd.Unavailable));
    assert.ok(Date.now() - t0 < 3000);
    assert.ok(ids().length > 1);
    proxy.faults.length = 0;
  });

  test('without request ids an unknown outcome is not retried', async () => {
    proxy.seen.length = 0;
    const n = new limitd.Client(['http://' + proxy.addr], { requestIds: false });
    try {
      proxy.inject('/v1/check', 'drop');
      await rejectsWith(n.check({ key: uniq('k'), policy: p }), limitd.OutcomeUnknown);
      assert.equal(proxy.bodies('/v1/check')[0].request_id, undefined);
    } finally {
      n.close();
    }
  });
});
