"""The README's "Use" example, run as written against a real node: only the
placeholder addresses and token are replaced by the test node's."""

import io
import os
import re
import unittest
from contextlib import redirect_stdout

import harness  # sets sys.path for the limitd package

README = os.path.join(os.path.dirname(harness.HERE), "README.md")
ADDRS = '["http://10.0.0.1:8080", "http://10.0.0.2:8080"]'

cluster = None


def setUpModule():
    global cluster
    cluster = harness.Cluster(1, token=harness.TOKEN).start()


def tearDownModule():
    if cluster is not None:
        cluster.stop()


def use_block():
    with open(README) as f:
        text = f.read()
    m = re.search(r"^## Use\n.*?^```python\n(.*?)^```", text, re.S | re.M)
    if m is None:
        raise AssertionError("README.md has no ```python block under ## Use")
    return m.group(1)


class ReadmeTest(unittest.TestCase):
    def test_use_example_runs_as_written(self):
        code = use_block()
        # The placeholders a reader replaces, and nothing else.
        self.assertIn(ADDRS, code)
        self.assertIn('token="ADMIN-TOKEN"', code)
        code = code.replace(ADDRS, repr([cluster.nodes[0].url])).replace('"ADMIN-TOKEN"', repr(harness.TOKEN))
        out = io.StringIO()
        with redirect_stdout(out):
            exec(compile(code, README, "exec"), {"__name__": "readme"})
        lines = out.getvalue().splitlines()
        # print(d.limit, d.remaining, d.reset_after_ms): the first check of
        # a new key under "api" (100 a minute).
        self.assertRegex(lines[0], r"^100 99 \d+$")
        # The batch: the good entry's decision, then the empty key's error
        # naming the field.
        self.assertIn("allowed=True", lines[1])
        self.assertIn("key", lines[2])


if __name__ == "__main__":
    unittest.main()
