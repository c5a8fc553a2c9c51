"""Test harness: real limitd processes on free loopback ports, and a fault
injecting proxy. The limitd binary is $LIMITD_BIN, or built once with
`go build ./cmd/limitd` from the repository root."""

import atexit
import http.client
import http.server
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # clients/python: the limitd package
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
TOKEN = "test-admin-token"

_bin = None
_bin_dir = None


def limitd_bin():
    """The limitd executable: $LIMITD_BIN, else built once into a temp dir."""
    global _bin, _bin_dir
    if _bin:
        return _bin
    env = os.environ.get("LIMITD_BIN")
    if env:
        if not os.access(env, os.X_OK):
            raise RuntimeError("LIMITD_BIN=%s is not an executable" % env)
        _bin = env
        return _bin
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("LIMITD_BIN is unset and there is no go to build limitd with")
    _bin_dir = tempfile.mkdtemp(prefix="limitd-pytest-bin-")
    atexit.register(shutil.rmtree, _bin_dir, True)
    out = os.path.join(_bin_dir, "limitd")
    subprocess.run([go, "build", "-o", out, "./cmd/limitd"], cwd=REPO, check=True)
    _bin = out
    return _bin


def free_ports(n):
    """n distinct free loopback ports (held open together, then released)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            for _try in range(50):
                try:
                    s.bind(("127.0.0.1", random.randint(20000, 32000)))
                    break
                except OSError:
                    continue
            else:
                s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def require_tool(name):
    """Skip a test whose tool is missing, except in CI, where it fails."""
    if shutil.which(name) is None:
        if IN_CI:
            raise AssertionError("%s is required with CI set" % name)
        raise unittest.SkipTest("%s is not installed" % name)


class Node:
    def __init__(self, node_id, http_port, raft_port, root, join=None, token=None, extra=()):
        self.id = node_id
        self.http_addr = "127.0.0.1:%d" % http_port
        self.raft_addr = "127.0.0.1:%d" % raft_port
        self.data_dir = os.path.join(root, node_id)
        self.log_path = os.path.join(root, node_id + ".log")
        self.join, self.token, self.extra = join, token, list(extra)
        self.scheme = "http"
        self.proc = None

    @property
    def url(self):
        return "%s://%s" % (self.scheme, self.http_addr)

    def start(self):
        args = [limitd_bin(), "serve", "--node-id", self.id, "--http-addr", self.http_addr,
                "--raft-addr", self.raft_addr, "--data-dir", self.data_dir, "--log-level", "warn"]
        if self.join:
            args += ["--join", self.join]
        if self.token:
            args += ["--admin-token", self.token]
        args += self.extra
        env = {k: v for k, v in os.environ.items() if not k.startswith("LIMITD_")}
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout=60, ssl_context=None):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if not self.running():
                raise RuntimeError("%s exited during start-up:\n%s" % (self.id, self.logs()))
            host, port = self.http_addr.rsplit(":", 1)
            try:
                if self.scheme == "https":
                    c = http.client.HTTPSConnection(host, int(port), timeout=2, context=ssl_context)
                else:
                    c = http.client.HTTPConnection(host, int(port), timeout=2)
                c.request("GET", "/readyz")
                r = c.getresponse()
                r.read()
                c.close()
                if r.status == 200:
                    return
                last = "readyz %d" % r.status
            except OSError as e:
                last = e
            time.sleep(0.1)
        raise RuntimeError("%s not ready in %ss (%s):\n%s" % (self.id, timeout, last, self.logs()))

    def stop(self, sig=signal.SIGTERM):
        if self.running():
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.log.close()

    def kill(self):
        self.stop(signal.SIGKILL)

    def logs(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-4000:].decode("utf-8", "replace")
        except OSError:
            return ""


class Cluster:
    """n limitd processes in a temp dir: the first bootstraps, the others join it."""

    def __init__(self, n=1, token=None, extra=()):
        self.root = tempfile.mkdtemp(prefix="limitd-pytest-")
        ports = free_ports(2 * n)
        self.nodes = []
        for i in range(n):
            join = self.nodes[0].url if i > 0 else None
            self.nodes.append(Node("n%d" % (i + 1), ports[2 * i], ports[2 * i + 1], self.root, join=join,
                                   token=token, extra=extra))

    def start(self, ssl_context=None, scheme="http"):
        try:
            for i, nd in enumerate(self.nodes):
                nd.scheme = scheme
                nd.start()
                if i == 0:
                    nd.wait_ready(ssl_context=ssl_context)
            for nd in self.nodes:
                nd.wait_ready(ssl_context=ssl_context)
            if len(self.nodes) > 1:
                self._wait_members(len(self.nodes))
        except Exception:
            self.stop()
            raise
        return self

    def _wait_members(self, n, timeout=60):
        deadline = time.monotonic() + timeout
        host, port = self.nodes[0].http_addr.rsplit(":", 1)
        while time.monotonic() < deadline:
            try:
                c = http.client.HTTPConnection(host, int(port), timeout=2)
                c.request("GET", "/v1/cluster")
                st = json.loads(c.getresponse().read())
                c.close()
                if len(st.get("members") or []) == n:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise RuntimeError("cluster did not reach %d members" % n)

    def stop(self):
        for nd in self.nodes:
            nd.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class FaultProxy:
    """An HTTP proxy in front of one node that can, per request, drop the
    connection after forwarding (the answer is lost: outcome unknown), answer
    503 outcome_unknown after forwarding, or answer 503 unavailable without
    forwarding. It rewrites the node's address in /v1/cluster answers to its
    own, so a leader-aware client keeps going through it. Every forwarded
    request body is recorded in ``seen``."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.faults = []  # (path prefix, action) consumed in order
        self.seen = []  # (method, path, body) of every request received
        self.mu = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                with proxy.mu:
                    proxy.seen.append((self.command, self.path, body))
                    action = None
                    for i, (prefix, act) in enumerate(proxy.faults):
                        if self.path.startswith(prefix):
                            action = act
                            del proxy.faults[i]
                            break
                if action == "unavailable":
                    return self._reply(503, b'{"error":{"code":"unavailable","message":"injected: no leader"}}',
                                       {"Retry-After": "1"})
                h, p = proxy.upstream.rsplit(":", 1)
                c = http.client.HTTPConnection(h, int(p), timeout=10)
                hdrs = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                c.request(self.command, self.path, body=body, headers=hdrs)
                r = c.getresponse()
                data = r.read()
                c.close()
                if action == "drop":
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                if action == "outcome_unknown":
                    return self._reply(503, b'{"error":{"code":"outcome_unknown","message":"injected"}}',
                                       {"Retry-After": "1"})
                if self.path.startswith("/v1/cluster"):
                    data = data.replace(proxy.upstream.encode(), proxy.addr.encode())
                extra = {}
                for k in ("Retry-After", "Limitd-Leader", "WWW-Authenticate"):
                    if r.getheader(k):
                        extra[k] = r.getheader(k)
                self._reply(r.status, data, extra)

            def _reply(self, status, data, headers):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.addr = "127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def inject(self, prefix, action):
        with self.mu:
            self.faults.append((prefix, action))

    def bodies(self, prefix):
        with self.mu:
            return [json.loads(b) for m, p, b in self.seen if p.startswith(prefix) and b]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
