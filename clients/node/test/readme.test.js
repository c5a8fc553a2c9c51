'use strict';
// The README's "Use" example, run as written against a real node: only the
// placeholder addresses and token are replaced by the test node's, and
// require('limitd') is this package.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const h = require('../testing/harness.js');
const limitd = require('../index.js');

const README = path.join(__dirname, '..', 'README.md');
const ADDRS = "['http://10.0.0.1:8080', 'http://10.0.0.2:8080']";

let cluster;

before(async () => {
  cluster = await h.Cluster.start(1, { token: h.TOKEN });
});

after(async () => {
  if (cluster) await cluster.stop();
});

test('the README Use example runs as written', async () => {
  const m = /^## Use\n[\s\S]*?^```js\n([\s\S]*?)^```/m.exec(fs.readFileSync(README, 'utf8'));
  assert.ok(m, 'README.md has no ```js block under ## Use');
  let code = m[1];
  // The placeholders a reader replaces, and nothing else.
  assert.ok(code.includes(ADDRS) && code.includes("token: 'ADMIN-TOKEN'"), 'the placeholders changed: update this test');
  code = code.replace(ADDRS, JSON.stringify([cluster.nodes[0].url])).replace("'ADMIN-TOKEN'", JSON.stringify(h.TOKEN));
  const lines = [];
  const out = { log: (...a) => lines.push(a.join(' ')) };
  const req = (name) => {
    assert.equal(name, 'limitd');
    return limitd;
  };
  const AsyncFunction = (async () => {}).constructor;
  await new AsyncFunction('require', 'console', code)(req, out);
  // The batch: the good entry's remaining (a new key under "api", 100 a
  // minute), then the empty key's error naming the field.
  assert.deepEqual(lines, ['99', 'invalid_argument key']);
});
