'use strict';
// Leader awareness and failover against a real three-node cluster.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const h = require('../testing/harness.js');
const limitd = require('../index.js');

let cluster;
before(async () => { cluster = await h.Cluster.start(3); });
after(async () => { if (cluster) await cluster.stop(); });

test('the leader is learned from a follower; failover after the leader dies', async () => {
  const probe = new limitd.Client(cluster.nodes.map((nd) => nd.url));
  const leader = (await probe.cluster()).leader_http_addr;
  probe.close();
  const followers = cluster.nodes.filter((nd) => nd.httpAddr !== leader);
  assert.equal(followers.length, 2);

  // A dead address and one follower: the client learns the leader and every member.
  const dead = `127.0.0.1:${(await h.freePorts(1))[0]}`;
  const c = new limitd.Client([dead, followers[0].url], { timeout: 15000 });
  try {
    const name = 'pol-' + Date.now();
    await c.putPolicy({ name, algorithm: 'fixed_window', limit: 100, window: '1h' });
    const key = 'k-' + Date.now();
    assert.equal((await c.check({ key, policy: name })).allowed, true);
    assert.equal(c.target, leader);
    assert.deepEqual(new Set(c.endpoints.filter((e) => e !== dead)), new Set(cluster.nodes.map((nd) => nd.httpAddr)));

    await cluster.nodes.find((nd) => nd.httpAddr === leader).kill();
    const t0 = Date.now();
    for (let i = 0; i < 5; i++) assert.equal((await c.check({ key, policy: name })).allowed, true);
    assert.ok(Date.now() - t0 < 15000);
    // Right after the election the client may still be going round the
    // nodes (the target unknown); within a refresh it names the new leader.
    let extra = 0;
    while (!followers.some((nd) => nd.httpAddr === c.target) && Date.now() - t0 < 20000) {
      await new Promise((r) => setTimeout(r, 200));
      assert.equal((await c.check({ key, policy: name })).allowed, true);
      extra++;
    }
    assert.notEqual(c.target, leader);
    assert.ok(followers.some((nd) => nd.httpAddr === c.target), `target ${c.target}`);
    assert.equal((await c.peek(key, { policy: name })).remaining, 94 - extra);
    assert.ok(c.stats.leaderChanges >= 2);
  } finally {
    c.close();
  }
});
