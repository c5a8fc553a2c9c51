"""The Python client against one real limitd node (with an admin token)."""

import time
import unittest
import uuid

import harness  # sets sys.path for the limitd package
import limitd
from limitd import Check, Limit

cluster = None


def setUpModule():
    global cluster
    cluster = harness.Cluster(1, token=harness.TOKEN).start()


def tearDownModule():
    if cluster is not None:
        cluster.stop()


def uniq(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:10])


def dead_addr():
    return "127.0.0.1:%d" % harness.free_ports(1)[0]


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.url = cluster.nodes[0].url
        self.c = limitd.Client([self.url], token=harness.TOKEN)
        self.addCleanup(self.c.close)

    def policy(self, limit=3, window="60s", algorithm="sliding_window", **kw):
        name = uniq("p")
        self.c.put_policy(limitd.Policy(name=name, algorithm=algorithm, limit=limit, window=window, **kw))
        self.addCleanup(lambda: self.c.delete_policy(name))
        return name

    def test_allowed_then_refused_with_retry_after(self):
        p = self.policy(limit=3)
        key = uniq("user")
        for want in (2, 1, 0):
            d = self.c.check(key, policy=p)
            self.assertTrue(d.allowed)
            self.assertEqual((d.limit, d.remaining, d.retry_after_ms), (3, want, 0))
            self.assertGreater(d.reset_after_ms, 0)
        d = self.c.check(key, policy=p)
        self.assertFalse(d.allowed)
        self.assertFalse(d.degraded)
        self.assertEqual(d.remaining, 0)
        self.assertGreater(d.retry_after_ms, 0)
        self.assertLessEqual(d.retry_after_ms, 120000)  # sliding_window: up to two windows
        self.assertEqual(self.c.target, cluster.nodes[0].http_addr)  # the leader was learned

    def test_inline_limit_and_never(self):
        lim = Limit("token_bucket", 5, window="1s", burst=10)
        d = self.c.check(uniq("ip"), limit=lim, cost=3)
        self.assertTrue(d.allowed)
        self.assertEqual((d.limit, d.remaining), (5, 7))  # limit: the rate; remaining: of the burst
        d = self.c.check(uniq("ip"), limit={"algorithm": "fixed_window", "limit": 2, "window": "1m"}, cost=3)
        self.assertFalse(d.allowed)
        self.assertEqual(d.retry_after_ms, limitd.NEVER)

    def test_check_all_is_atomic(self):
        small, big = self.policy(limit=1), self.policy(limit=100)
        key = uniq("user")
        r = self.c.check_all([Check(key, policy=small), Check(key, policy=big)])
        self.assertTrue(r.allowed)
        self.assertEqual([d.remaining for d in r.results], [0, 99])
        r = self.c.check_all([(key, small), {"key": key, "policy": big}])
        self.assertFalse(r.allowed)
        self.assertFalse(r.results[0].allowed)
        self.assertGreater(r.results[0].retry_after_ms, 0)
        # The refusal consumed nothing in the limit that would have allowed.
        self.assertEqual(self.c.peek(key, policy=big).remaining, 99)

    def test_check_all_request_id_replay(self):
        p = self.policy(limit=10)
        key, rid = uniq("user"), uniq("all")
        a = self.c.check_all([(key, p), (key + "-2", p)], request_id=rid)
        b = self.c.check_all([(key, p), (key + "-2", p)], request_id=rid)
        self.assertFalse(a.replayed)
        self.assertTrue(b.replayed)
        self.assertEqual(self.c.peek(key, policy=p).remaining, 9)

    def test_batch_entry_errors(self):
        p = self.policy(limit=3)
        res = self.c.batch([Check(uniq("a"), policy=p), Check("", policy=p), Check(uniq("b"), policy="nope-" + p),
                            Check(uniq("c"), limit=Limit("fixed_window", 1, window="60"))])
        self.assertEqual(len(res), 4)
        self.assertTrue(res[0].ok)
        self.assertEqual(res[0].decision.remaining, 2)
        self.assertIsInstance(res[1].error, limitd.InvalidArgument)
        self.assertEqual((res[1].error.code, res[1].error.field), ("invalid_argument", "key"))
        self.assertIsInstance(res[2].error, limitd.NotFound)
        self.assertEqual((res[2].error.code, res[2].error.field), ("not_found", "policy"))
        self.assertEqual(res[3].error.field, "limit.window")

    def test_typed_errors_name_the_field(self):
        with self.assertRaises(limitd.InvalidArgument) as cm:
            self.c.check(uniq("k"), limit=Limit("sliding_window", 3, window="60"))
        e = cm.exception
        self.assertEqual((e.status, e.code, e.field), (400, "invalid_argument", "limit.window"))
        self.assertIn("invalid duration", e.message)
        self.assertIn("limit.window", str(e))
        with self.assertRaises(limitd.InvalidArgument) as cm:
            self.c.check("", policy="x")
        self.assertEqual(cm.exception.field, "key")
        with self.assertRaises(limitd.NotFound) as cm:
            self.c.check(uniq("k"), policy=uniq("missing"))
        self.assertEqual((cm.exception.status, cm.exception.field), (404, "policy"))
        with self.assertRaises(limitd.InvalidArgument) as cm:
            self.c.check(uniq("k"), policy="x", cost=-1)
        self.assertEqual(cm.exception.field, "cost")
        self.assertIsInstance(cm.exception, limitd.LimitdError)
        self.assertNotIsInstance(cm.exception, limitd.Unavailable)

    def test_request_id_replay_consumes_nothing(self):
        p = self.policy(limit=5)
        key, rid = uniq("user"), uniq("req")
        a = self.c.check(key, policy=p, request_id=rid)
        b = self.c.check(key, policy=p, request_id=rid)
        self.assertFalse(a.replayed)
        self.assertTrue(b.replayed)
        self.assertEqual((a.remaining, b.remaining), (4, 4))
        self.assertEqual(self.c.peek(key, policy=p).remaining, 4)
        # The id is bound to its request: another key under it is a conflict.
        with self.assertRaises(limitd.Conflict) as cm:
            self.c.check(key + "-other", policy=p, request_id=rid)
        self.assertEqual((cm.exception.status, cm.exception.field), (409, "key"))

    def test_generated_request_ids_are_unique(self):
        p = self.policy(limit=100)
        key = uniq("user")
        for _ in range(5):
            self.assertFalse(self.c.check(key, policy=p).replayed)
        self.assertEqual(self.c.peek(key, policy=p).remaining, 95)

    def test_threads_share_one_client(self):
        import threading
        p = self.policy(limit=1000, window="1h", algorithm="fixed_window")
        key = uniq("user")
        errors = []

        def work():
            try:
                for _ in range(20):
                    self.assertTrue(self.c.check(key, policy=p).allowed)
            except Exception as e:  # reported below
                errors.append(e)
        ts = [threading.Thread(target=work) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(self.c.peek(key, policy=p).remaining, 1000 - 160)

    def test_peek_and_reset(self):
        p = self.policy(limit=3)
        key = "user/with ?odd% chars-" + uniq("k")
        self.c.check(key, policy=p, cost=2)
        d = self.c.peek(key, policy=p)
        self.assertEqual((d.allowed, d.remaining), (True, 1))
        self.c.reset(key, policy=p)
        self.assertEqual(self.c.peek(key, policy=p).remaining, 3)
        lim = Limit("fixed_window", 4, window="1m")
        self.c.check(key, limit=lim)
        self.assertEqual(self.c.peek(key, limit=lim).remaining, 3)
        self.c.reset(key, limit=lim)
        self.assertEqual(self.c.peek(key, limit=lim).remaining, 4)

    def test_policy_crud(self):
        name = uniq("crud")
        got = self.c.put_policy({"name": name, "algorithm": "token_bucket", "limit": 10, "window": "60s",
                                 "burst": 20})
        self.assertEqual((got.name, got.window, got.burst, got.local_refusals), (name, "1m", 20, True))
        self.assertEqual(self.c.get_policy(name), got)
        self.assertIn(name, [p.name for p in self.c.list_policies()])
        got.limit = 11
        self.assertEqual(self.c.put_policy(got).limit, 11)
        self.c.delete_policy(name)
        with self.assertRaises(limitd.NotFound):
            self.c.get_policy(name)
        with self.assertRaises(limitd.NotFound):
            self.c.delete_policy(name)
        with self.assertRaises(limitd.InvalidArgument) as cm:
            self.c.put_policy(limitd.Policy(name=name, algorithm="sliding_window", limit=1, window="60"))
        self.assertEqual(cm.exception.field, "window")

    def test_admin_token_required(self):
        anon = limitd.Client([self.url])
        self.addCleanup(anon.close)
        with self.assertRaises(limitd.Unauthenticated) as cm:
            anon.put_policy(limitd.Policy(name=uniq("x"), algorithm="fixed_window", limit=1, window="1s"))
        self.assertEqual((cm.exception.status, cm.exception.code), (401, "unauthenticated"))
        wrong = limitd.Client([self.url], token="wrong")
        self.addCleanup(wrong.close)
        p = self.policy()
        with self.assertRaises(limitd.Unauthenticated):
            wrong.reset("k", policy=p)
        with self.assertRaises(limitd.Unauthenticated):
            wrong.delete_policy(p)
        # Checks, peeks and reads need no token.
        self.assertTrue(anon.check(uniq("k"), policy=p).allowed)
        self.assertEqual(anon.get_policy(p).name, p)
        # With the token, the admin view of /v1/cluster.
        self.assertEqual(self.c.cluster()["node_id"], "n1")
        self.assertNotIn("node_id", anon.cluster())

    def test_failover_first_address_dead(self):
        c = limitd.Client([dead_addr(), self.url], token=harness.TOKEN)
        self.addCleanup(c.close)
        p = self.policy()
        t0 = time.monotonic()
        self.assertTrue(c.check(uniq("k"), policy=p).allowed)
        self.assertLess(time.monotonic() - t0, 2)
        self.assertEqual(c.target, cluster.nodes[0].http_addr)


class FailModeTest(unittest.TestCase):
    """Against a closed port: a fail mode answers within far less than the timeout."""

    def run_mode(self, mode):
        c = limitd.Client(["http://" + dead_addr()], timeout=10, fail_mode=mode)
        self.addCleanup(c.close)
        t0 = time.monotonic()
        try:
            return c.check("k", policy="p")
        finally:
            self.elapsed = time.monotonic() - t0
            self.assertLess(self.elapsed, 2, "fail-fast took %.2fs" % self.elapsed)

    def test_fail_open(self):
        d = self.run_mode("open")
        self.assertTrue(d.allowed)
        self.assertTrue(d.degraded)

    def test_once_down_the_next_calls_fail_after_one_round(self):
        c = limitd.Client([dead_addr(), dead_addr()], timeout=10, fail_mode="open")
        self.addCleanup(c.close)
        t0 = time.monotonic()
        self.assertTrue(c.check("k", policy="p").degraded)
        first = time.monotonic() - t0
        self.assertGreaterEqual(first, limitd.DEFAULT_FAIL_FAST)
        # One round over the two nodes is at most one retry (two attempts);
        # waiting out fail_fast again would take several backoffs. Retries
        # are counted, not timed: a loaded machine slows both alike.
        for _ in range(3):
            r0 = c.stats["retries"]
            self.assertTrue(c.check("k", policy="p").degraded)
            self.assertLessEqual(c.stats["retries"] - r0, 2, "more than one round of retries once down")
        self.assertEqual(c.stats["failed_open"], 4)

    def test_fail_closed(self):
        d = self.run_mode("closed")
        self.assertFalse(d.allowed)
        self.assertTrue(d.degraded)
        self.assertEqual(d.retry_after_ms, 1000)

    def test_fail_error(self):
        with self.assertRaises(limitd.Unavailable) as cm:
            self.run_mode("error")
        self.assertNotIsInstance(cm.exception, limitd.OutcomeUnknown)  # nothing was sent
        self.assertEqual(cm.exception.code, "unavailable")

    def test_check_all_fails_open(self):
        c = limitd.Client([dead_addr(), dead_addr()], timeout=10, fail_mode="open")
        t0 = time.monotonic()
        r = c.check_all([("a", "p"), ("b", "p")])
        self.assertLess(time.monotonic() - t0, 2)
        self.assertTrue(r.allowed and r.degraded)

    def test_bad_fail_mode(self):
        with self.assertRaises(ValueError):
            limitd.Client(["127.0.0.1:1"], fail_mode="sideways")


class RetryTest(unittest.TestCase):
    """Retries with the same request_id through a fault-injecting proxy."""

    def setUp(self):
        self.proxy = harness.FaultProxy(cluster.nodes[0].http_addr)
        self.addCleanup(self.proxy.close)
        self.c = limitd.Client(["http://" + self.proxy.addr], token=harness.TOKEN)
        self.addCleanup(self.c.close)
        self.p = uniq("rp")
        self.c.put_policy(limitd.Policy(name=self.p, algorithm="fixed_window", limit=10, window="1h"))
        self.addCleanup(lambda: self.c.delete_policy(self.p))

    def ids(self):
        return [b.get("request_id") for b in self.proxy.bodies("/v1/check")]

    def test_connection_lost_after_sending_is_retried_with_the_same_id(self):
        key = uniq("k")
        self.proxy.inject("/v1/check", "drop")
        d = self.c.check(key, policy=self.p)
        self.assertTrue(d.allowed)
        self.assertTrue(d.replayed)  # the first attempt was counted; the retry got its decision
        self.assertEqual(d.remaining, 9)
        ids = self.ids()
        self.assertEqual(len(ids), 2)
        self.assertEqual(ids[0], ids[1])
        self.assertEqual(self.c.peek(key, policy=self.p).remaining, 9)  # counted once

    def test_outcome_unknown_is_retried_with_the_same_id(self):
        key = uniq("k")
        self.proxy.inject("/v1/check", "outcome_unknown")
        self.proxy.inject("/v1/check", "outcome_unknown")
        d = self.c.check(key, policy=self.p, cost=2)
        self.assertTrue(d.replayed)
        self.assertEqual(d.remaining, 8)
        ids = self.ids()
        self.assertEqual(len(ids), 3)
        self.assertEqual(len(set(ids)), 1)
        self.assertEqual(self.c.peek(key, policy=self.p).remaining, 8)

    def test_unavailable_is_retried(self):
        key = uniq("k")
        self.proxy.inject("/v1/check", "unavailable")
        d = self.c.check(key, policy=self.p)
        self.assertFalse(d.replayed)  # the first attempt never reached the node
        self.assertEqual(d.remaining, 9)
        self.assertEqual(len(set(self.ids())), 1)

    def test_batch_and_check_all_retried_with_the_same_ids(self):
        key = uniq("k")
        self.proxy.inject("/v1/check/batch", "drop")
        res = self.c.batch([(key, self.p), (key, self.p)])
        self.assertTrue(all(r.decision.replayed for r in res))
        bodies = self.proxy.bodies("/v1/check/batch")
        self.assertEqual(bodies[0], bodies[1])
        self.proxy.inject("/v1/check/all", "outcome_unknown")
        r = self.c.check_all([(key, self.p)])
        self.assertTrue(r.replayed)
        self.assertEqual(self.c.peek(key, policy=self.p).remaining, 7)

    def test_deadline_ends_retries_as_outcome_unknown(self):
        for _ in range(100):
            self.proxy.inject("/v1/check", "outcome_unknown")
        t0 = time.monotonic()
        with self.assertRaises(limitd.OutcomeUnknown) as cm:
            self.c.check(uniq("k"), policy=self.p, timeout=0.8)
        self.assertLess(time.monotonic() - t0, 3)
        self.assertIsInstance(cm.exception, limitd.Unavailable)
        self.assertGreater(len(self.ids()), 1)

    def test_without_request_ids_an_unknown_outcome_is_not_retried(self):
        c = limitd.Client(["http://" + self.proxy.addr], request_ids=False)
        self.addCleanup(c.close)
        self.proxy.inject("/v1/check", "drop")
        with self.assertRaises(limitd.OutcomeUnknown):
            c.check(uniq("k"), policy=self.p)
        self.assertIsNone(self.proxy.bodies("/v1/check")[0].get("request_id"))


if __name__ == "__main__":
    unittest.main()
