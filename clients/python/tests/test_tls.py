"""HTTPS: a node serving TLS, verified with a CA file."""

import os
import shutil
import ssl
import subprocess
import tempfile
import time
import unittest

import harness
import limitd

cluster = None
certs = None


def setUpModule():
    global cluster, certs
    harness.require_tool("openssl")
    certs = tempfile.mkdtemp(prefix="limitd-pytest-certs-")
    subprocess.run(["bash", os.path.join(harness.REPO, "scripts", "certs.sh"), certs, "n1"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cluster = harness.Cluster(1, extra=["--tls-cert", os.path.join(certs, "n1.pem"),
                                        "--tls-key", os.path.join(certs, "n1-key.pem")])
    cluster.start(ssl_context=ssl.create_default_context(cafile=os.path.join(certs, "ca.pem")), scheme="https")


def tearDownModule():
    if cluster is not None:
        cluster.stop()
    if certs is not None:
        shutil.rmtree(certs, ignore_errors=True)


class TLSTest(unittest.TestCase):
    def test_https_with_ca_file(self):
        c = limitd.Client(["https://" + cluster.nodes[0].http_addr], ca_file=os.path.join(certs, "ca.pem"))
        self.addCleanup(c.close)
        d = c.check("k", limit=limitd.Limit("fixed_window", 2, window="1m"))
        self.assertTrue(d.allowed)
        self.assertEqual(d.remaining, 1)

    def test_untrusted_certificate_is_a_config_error(self):
        c = limitd.Client(["https://" + cluster.nodes[0].http_addr], timeout=10, fail_mode="open")
        self.addCleanup(c.close)
        t0 = time.monotonic()
        with self.assertRaises(limitd.ConfigError) as cm:  # not hidden by the fail mode
            c.check("k", limit=limitd.Limit("fixed_window", 2, window="1m"))
        self.assertLess(time.monotonic() - t0, 2)
        self.assertEqual(cm.exception.kind, "unknown_authority")
        self.assertNotIsInstance(cm.exception, limitd.Unavailable)

    def test_plain_http_to_https_node_is_a_config_error(self):
        c = limitd.Client(["http://" + cluster.nodes[0].http_addr], timeout=10)
        self.addCleanup(c.close)
        with self.assertRaises(limitd.ConfigError) as cm:
            c.check("k", limit=limitd.Limit("fixed_window", 2, window="1m"))
        self.assertEqual(cm.exception.kind, "tls_required")


if __name__ == "__main__":
    unittest.main()
