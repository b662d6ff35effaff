"""The agents the tests talk to: given by the environment, or started here.

* ``BQ_TEST_AGENT_SOCKET``, ``BQ_TEST_AGENT_SOCKET2`` (and optionally
  ``BQ_TEST_AGENT_SOCKET3``): the Unix sockets of running agents of two (three)
  different identities of one cluster, as test/e2e/python_test.go starts them.
  ``BQ_TEST_AGENT_URL`` and ``BQ_TEST_AGENT_TOKEN_FILE``: an agent's
  ``--http`` listener and its token file (an agent of its own, with
  ``--no-socket``), if there is one.
* Else ``BQ_TEST_BIN``: a directory with built ``bqserver`` and ``bqclient``;
  a local cluster (``bqserver dev``), three agents on sockets and one on TCP are started here and
  stopped at the end.
* Else the tests that need agents are skipped.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import List, Optional

import bqlock


class Agents:
    def __init__(self) -> None:
        self.sockets: List[str] = []
        self.url: Optional[str] = None
        self.token_file: Optional[str] = None
        self._procs: List[subprocess.Popen] = []
        self._dir: Optional[str] = None

    def client(self, i: int, **kw) -> bqlock.Client:
        return bqlock.Client(socket=self.sockets[i], **kw)

    # -- from the environment

    @classmethod
    def from_env(cls) -> Optional["Agents"]:
        s1 = os.environ.get("BQ_TEST_AGENT_SOCKET")
        if s1:
            a = cls()
            a.sockets = [s for s in (s1, os.environ.get("BQ_TEST_AGENT_SOCKET2"), os.environ.get("BQ_TEST_AGENT_SOCKET3")) if s]
            a.url = os.environ.get("BQ_TEST_AGENT_URL") or None
            a.token_file = os.environ.get("BQ_TEST_AGENT_TOKEN_FILE") or None
            return a
        bindir = os.environ.get("BQ_TEST_BIN")
        if bindir:
            a = cls()
            try:
                a._start(bindir)
            except BaseException:
                a.stop()
                raise
            return a
        return None

    # -- started here

    def _start(self, bindir: str) -> None:
        self._dir = tempfile.mkdtemp(prefix="bqpy")
        d = self._dir
        base = _free_udp_base(4)
        with open(os.path.join(d, "dev.out"), "wb") as log:
            dev = subprocess.Popen(
                [os.path.join(bindir, "bqserver"), "dev", "--dir", os.path.join(d, "c"), "--port-base", str(base)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._procs.append(dev)
        _wait_file_has(os.path.join(d, "dev.out"), b"press Ctrl-C", dev, 60)
        cluster = os.path.join(d, "c", "cluster.yaml")
        port = _free_tcp_port()
        self.token_file = os.path.join(d, "token")
        for i in range(4):
            args = [
                os.path.join(bindir, "bqclient"), "--cluster", cluster, "--identity", os.path.join(d, "a%d.key" % (i + 1)),
                "agent",
            ]
            if i < 3:
                sock = os.path.join(d, "a%d.sock" % (i + 1))
                args += ["--socket", sock]
                self.sockets.append(sock)
            else:  # TCP only: an agent with --http wants the token on its socket too
                args += ["--no-socket", "--http", "127.0.0.1:%d" % port, "--token-file", self.token_file]
                self.url = "http://127.0.0.1:%d" % port
            with open(os.path.join(d, "a%d.out" % (i + 1)), "wb") as out:
                self._procs.append(subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT))
        for s in self.sockets:
            _wait_healthy(bqlock.Client(socket=s, timeout=2), 30)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.token_file):
            if time.monotonic() > deadline:
                raise RuntimeError("the TCP agent made no token file")
            time.sleep(0.05)
        _wait_healthy(bqlock.Client(url=self.url, token_file=self.token_file, timeout=2), 30)

    def stop(self) -> None:
        for p in reversed(self._procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self._procs):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._procs = []
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def _free_udp_base(n: int) -> int:
    for _ in range(200):
        base = random.randrange(20000, 60000 - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no %d free consecutive UDP ports" % n)


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_file_has(path: str, what: bytes, proc: subprocess.Popen, within: float) -> None:
    deadline = time.monotonic() + within
    while True:
        with open(path, "rb") as f:
            out = f.read()
        if what in out:
            return
        if proc.poll() is not None:
            raise RuntimeError("%s exited (%s):\n%s" % (proc.args[0], proc.returncode, out.decode(errors="replace")))
        if time.monotonic() > deadline:
            raise RuntimeError("%s did not say %r within %ss:\n%s" % (proc.args[0], what, within, out.decode(errors="replace")))
        time.sleep(0.05)


def _wait_healthy(c: bqlock.Client, within: float) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            if c.health().get("status") == "ok":
                return
        except bqlock.AgentUnreachable:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the agent at %s is not healthy within %ss" % (c.where, within))
        time.sleep(0.05)
