"""bqlock against a real cluster and real agents (see agents.py for where they come from).

Run: python3 -m unittest discover -s clients/python/tests -v
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
import unittest
import uuid
from typing import Any, Callable, List, Optional, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bqlock  # noqa: E402
from agents import Agents  # noqa: E402

AGENTS: Optional[Agents] = None
RUN = uuid.uuid4().hex[:8]  # lock names are this run's own, on a cluster that may be reused


def setUpModule() -> None:
    global AGENTS
    AGENTS = Agents.from_env()
    if AGENTS is None:
        raise unittest.SkipTest(
            "no agent to test against: set BQ_TEST_AGENT_SOCKET and BQ_TEST_AGENT_SOCKET2 (two agents of two "
            "identities of one cluster; test/e2e/python_test.go does), or BQ_TEST_BIN to a directory with "
            "bqserver and bqclient to start a local cluster and agents here"
        )


def tearDownModule() -> None:
    if AGENTS is not None:
        AGENTS.stop()


def lock_name(what: str) -> str:
    return "py-%s/%s" % (RUN, what)


def wait_until(cond: Callable[[], Any], within: float, what: str) -> Any:
    """Poll cond (a cross-process observation) until it is true, or fail after within seconds."""
    deadline = time.monotonic() + within
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("not within %ss: %s" % (within, what))
        time.sleep(0.02)


def waiters(c: bqlock.Client, name: str) -> List[bqlock.Participant]:
    """The lock's queue but its holders. (An agent's queue has shown every holder
    but the first as well, though docs/agent.md says it is the queue "in the order
    it will enter".)"""
    st = c.status(name)
    holders = {p.client for p in st.holders}
    return [p for p in st.queue if p.client not in holders]


class AgentTest(unittest.TestCase):
    """A test with the agents' clients: c1, c2 (two identities) and c3 (a third, if any)."""

    def setUp(self) -> None:
        assert AGENTS is not None
        self.c1 = AGENTS.client(0)
        if len(AGENTS.sockets) < 2:
            self.skipTest("needs a second agent of another identity: BQ_TEST_AGENT_SOCKET2")
        self.c2 = AGENTS.client(1)
        self.c3 = AGENTS.client(2) if len(AGENTS.sockets) > 2 else None

    def need_c3(self) -> bqlock.Client:
        if self.c3 is None:
            self.skipTest("needs a third agent of a third identity: BQ_TEST_AGENT_SOCKET3")
        return self.c3


class Contention:
    """Threads that take one lock in turns and record when they held it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.mu = threading.Lock()
        self.inside = 0
        self.overlaps = 0
        self.intervals: List[Tuple[float, float, int, bool]] = []  # start, end, token_int, valid throughout
        self.errors: List[BaseException] = []

    def worker(self, c: bqlock.Client, rounds: int, **kw: Any) -> None:
        try:
            for _ in range(rounds):
                with c.lock(self.name, wait=60, **kw) as h:
                    start = time.monotonic()
                    with self.mu:
                        self.inside += 1
                        if self.inside > 1:
                            self.overlaps += 1
                    time.sleep(0.005)  # a critical section that takes time: an overlap would show
                    valid = h.is_valid()
                    with self.mu:
                        self.inside -= 1
                    end = time.monotonic()
                    self.intervals.append((start, end, h.token_int, valid))
        except BaseException as e:  # reported by check
            self.errors.append(e)

    def run(self, test: unittest.TestCase, clients: List[bqlock.Client], rounds: int, **kw: Any) -> None:
        threads = [threading.Thread(target=self.worker, args=(c, rounds), kwargs=kw) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
            test.assertFalse(t.is_alive(), "a contender still runs after 120 s (liveness)")
        test.assertEqual(self.errors, [])
        test.assertEqual(len(self.intervals), len(clients) * rounds)
        test.assertEqual(self.overlaps, 0, "two holders were inside at once")
        ivs = sorted(self.intervals)
        for i, (start, end, token, valid) in enumerate(ivs):
            test.assertTrue(valid, "holder %d's hold was not valid inside" % i)
            if i:
                pstart, pend, ptoken, _ = ivs[i - 1]
                test.assertGreaterEqual(start, pend, "holder %d began before holder %d ended" % (i, i - 1))
                test.assertGreater(token, ptoken, "holder %d's token is not above the one before" % i)


class TestLocks(AgentTest):
    def test_lock_unlock_and_token_growth(self) -> None:
        n = lock_name("basic")
        with self.c1.lock(n) as h1:
            self.assertEqual((h1.name, h1.mode, h1.kind, h1.state), (n, "exclusive", "lock", "held"))
            self.assertTrue(h1.is_valid())
            self.assertFalse(h1.lost.is_set())
            self.assertRegex(h1.token, r"^\d+\.[0-9a-f]+$")
            self.assertIsInstance(h1.token_int, int)
            self.assertTrue(h1.lock_id.startswith("h_"))
            self.assertIsNotNone(h1.valid_until)
            self.assertGreater(h1.time_left(), 0)
            st = self.c2.status(n)
            self.assertEqual([p.token for p in st.holders], [h1.token])
            h1.check()
        # Leaving the block released it, and said so.
        self.assertTrue(h1.lost.is_set())
        self.assertEqual(h1.lost_reason, "released")
        self.assertFalse(h1.is_valid())
        self.assertRaises(bqlock.Lost, h1.check)
        self.assertTrue(h1.release(), "releasing again says the same")
        # The next holders' tokens grow, from either identity.
        h2 = self.c2.try_lock(n)
        self.assertIsNotNone(h2, "released at the servers when release returned")
        assert h2 is not None
        self.assertGreater(h2.token_int, h1.token_int)
        self.assertTrue(h2.release())
        with self.c1.lock(n) as h3:
            self.assertGreater(h3.token_int, h2.token_int)

    def test_names_are_percent_encoded(self) -> None:
        n = lock_name("a/b c?d#e%f+é")
        with self.c1.lock(n) as h:
            self.assertEqual(h.name, n)
            self.assertEqual(self.c1.status(n).lock, n)
            self.assertEqual(self.c1.hold(h.lock_id).name, n)

    def test_two_holders_never_at_once_one_agent(self) -> None:
        # Four threads of one program contend through one agent (which queues them).
        Contention(lock_name("mutex1")).run(self, [self.c1] * 4, rounds=4)

    def test_two_holders_never_at_once_two_agents(self) -> None:
        # Two threads through each of two agents (two identities: the bakery decides).
        Contention(lock_name("mutex2")).run(self, [self.c1, self.c2, self.c1, self.c2], rounds=4)

    def test_try_lock_busy_is_none(self) -> None:
        n = lock_name("try")
        with self.c1.lock(n) as h:
            self.assertIsNone(self.c2.try_lock(n), "another identity holds it")
            self.assertIsNone(self.c1.try_lock(n), "another caller of this agent holds it")
            with self.assertRaises(bqlock.Busy) as cm:
                self.c2.acquire(n, try_=True)
            self.assertEqual(cm.exception.status, 409)
        h2 = self.c2.try_lock(n)
        self.assertIsNotNone(h2)
        assert h2 is not None
        self.assertGreater(h2.token_int, h.token_int)
        h2.release()

    def test_shared_readers_together_writer_alone(self) -> None:
        n = lock_name("rw")
        r1 = self.c1.lock(n, shared=True)
        r2 = self.c2.try_lock(n, shared=True)
        self.assertIsNotNone(r2, "a second reader (another identity) holds with the first")
        assert r2 is not None
        self.assertEqual((r1.mode, r2.mode), ("shared", "shared"))
        self.assertTrue(r1.is_valid() and r2.is_valid())
        self.assertEqual(len(self.c1.status(n).holders), 2)
        self.assertTrue(r1.release())
        self.assertIsNone(self.c1.try_lock(n), "a writer waits for every reader")
        self.assertTrue(r2.release())
        w = self.c1.try_lock(n)
        self.assertIsNotNone(w, "the writer enters once the readers left")
        assert w is not None
        self.assertEqual(w.mode, "exclusive")
        self.assertIsNone(self.c2.try_lock(n, shared=True), "a reader waits for the writer")
        self.assertTrue(w.release())
        r3 = self.c2.try_lock(n, shared=True)
        self.assertIsNotNone(r3)
        assert r3 is not None
        r3.release()

    def test_semaphore_of_two_admits_two_not_three(self) -> None:
        c3 = self.need_c3()
        n = lock_name("sem")
        s1, s2, s3 = (c.semaphore(n, 2) for c in (self.c1, self.c2, c3))
        with s1.acquire(wait=30) as a:
            b = s2.try_acquire()
            self.assertIsNotNone(b, "the second permit is free")
            assert b is not None
            self.assertEqual((a.mode, a.permits, b.permits), ("permits", 2, 2))
            self.assertEqual(len(self.c1.status(n).holders), 2)
            self.assertIsNone(s3.try_acquire(), "no third permit")
            got: "queue.Queue[Any]" = queue.Queue()

            def third() -> None:
                try:
                    got.put(s3.acquire(wait=30))
                except BaseException as e:
                    got.put(e)

            t = threading.Thread(target=third)
            t.start()
            # The third waits in the queue (cross-process: poll the status).
            wait_until(lambda: len(waiters(self.c1, n)) == 1, 20, "the third permit's holder queues")
            self.assertTrue(got.empty(), "the third entered while two held")
            self.assertTrue(b.release())
            c = got.get(timeout=30)
            t.join()
            self.assertIsInstance(c, bqlock.StreamHold)
            self.assertTrue(a.is_valid() and c.is_valid())
            c.release()

    def test_semaphore_via_lock_permits(self) -> None:
        n = lock_name("sem-lock")
        with self.c1.lock(n, permits=3) as h:
            self.assertEqual((h.mode, h.permits), ("permits", 3))
            with self.c2.lock(n, permits=3) as h2:
                self.assertTrue(h.is_valid() and h2.is_valid())

    def test_ttl_ends_a_stream_hold(self) -> None:
        n = lock_name("ttl")
        t0 = time.monotonic()
        h = self.c1.lock(n, ttl=1.5, ping=0.2)
        self.assertIsNotNone(h.expires)
        self.assertTrue(h.lost.wait(10), "lost never set")
        self.assertGreaterEqual(time.monotonic() - t0, 1.4)
        self.assertEqual(h.lost_reason, "expired")
        self.assertFalse(h.is_valid())
        self.assertFalse(h.release(), "a lost hold's release says it was lost")
        with self.c2.lock(n, wait=30) as h2:
            self.assertGreater(h2.token_int, h.token_int)

    def test_released_by_lock_id_elsewhere_sets_lost(self) -> None:
        n = lock_name("released-elsewhere")
        h = self.c1.lock(n)
        self.assertTrue(self.c1.hold(h.lock_id).release())
        self.assertTrue(h.lost.wait(10))
        self.assertEqual(h.lost_reason, "released")
        h.release()


class TestAcquire(AgentTest):
    def test_acquire_refresh_wait_release(self) -> None:
        n = lock_name("unary")
        h = self.c1.acquire(n, wait=10, ttl=60)
        self.assertIsInstance(h, bqlock.Hold)
        self.assertEqual((h.name, h.state), (n, "held"))
        self.assertIsNotNone(h.expires)
        self.assertTrue(h.is_valid())
        before = h.valid_until
        self.assertFalse(h.wait_lost(1.0), "held: wait_lost times out")
        self.assertTrue(h.is_valid(refresh=False))
        self.assertGreaterEqual(h.refresh().valid_until, before)
        self.assertIsNone(self.c2.try_lock(n))
        # Another thread waits for the loss; the release ends its wait.
        ended: "queue.Queue[bool]" = queue.Queue()
        t = threading.Thread(target=lambda: ended.put(self.c1.hold(h.lock_id).wait_lost(30)))
        t.start()
        self.assertTrue(h.release())
        self.assertTrue(ended.get(timeout=30))
        t.join()
        self.assertEqual(h.state, "released")
        self.assertTrue(h.lost.is_set())
        self.assertFalse(h.is_valid())
        with self.c2.lock(n, wait=10) as h2:
            self.assertGreater(h2.token_int, h.token_int)

    def test_acquire_as_context_manager_and_ttl_loss(self) -> None:
        n = lock_name("unary-ttl")
        with self.c1.acquire(n, ttl=1, shared=True) as h:
            self.assertEqual(h.mode, "shared")
            self.assertTrue(h.wait_lost(20))
            self.assertEqual((h.state, h.reason), ("lost", "expired"))
            self.assertFalse(h.release(), "a hold lost before its release says so")

    def test_request_id_acquire_is_idempotent(self) -> None:
        n = lock_name("rid-same")
        rid = "rid-" + uuid.uuid4().hex
        h = self.c1.acquire(n, wait=10, request_id=rid)
        again = self.c1.acquire(n, wait=10, request_id=rid)
        self.assertEqual((again.lock_id, again.token), (h.lock_id, h.token))
        with self.assertRaises(bqlock.Conflict) as cm:
            self.c1.acquire(n, wait=10, request_id=rid, ttl=30)
        self.assertEqual(cm.exception.field, "request_id")
        self.assertTrue(h.release())
        with self.assertRaises(bqlock.RequestUsed) as cm2:
            self.c1.acquire(n, wait=10, request_id=rid)
        assert cm2.exception.hold is not None
        self.assertEqual(cm2.exception.hold["lock_id"], h.lock_id)
        self.assertEqual(cm2.exception.hold["state"], "released")

    def test_request_id_retry_after_a_timeout_returns_the_same_hold(self) -> None:
        # The acquire's HTTP attempts time out on the client's side (attempt_timeout)
        # while another identity holds the lock; the client retries with the same
        # request_id, and the hold it gets is the one the agent's attempt took:
        # asking once more with the request_id answers the same lock_id.
        n = lock_name("rid-retry")
        holder = self.c2.lock(n)
        rid = "rid-" + uuid.uuid4().hex
        retried = _Retries()
        logger = logging.getLogger("bqlock")
        logger.addHandler(retried)
        old = logger.level
        logger.setLevel(logging.INFO)
        got: "queue.Queue[Any]" = queue.Queue()

        def acquire() -> None:
            try:
                got.put(self.c1.acquire(n, wait=30, request_id=rid, attempt_timeout=0.3))
            except BaseException as e:
                got.put(e)

        t = threading.Thread(target=acquire)
        try:
            t.start()
            self.assertTrue(retried.twice.wait(20), "the client did not retry after its attempts timed out")
            self.assertTrue(holder.release())
            h = got.get(timeout=30)
            t.join()
        finally:
            logger.removeHandler(retried)
            logger.setLevel(old)
        self.assertIsInstance(h, bqlock.Hold, h)
        self.assertEqual(retried.request_ids, {rid})
        again = self.c1.acquire(n, wait=5, request_id=rid)
        self.assertEqual((again.lock_id, again.token), (h.lock_id, h.token))
        self.assertGreater(h.token_int, holder.token_int)
        self.assertTrue(h.release())

    def test_no_request_id_no_retry(self) -> None:
        n = lock_name("rid-none")
        with self.c2.lock(n):
            retried = _Retries()
            logging.getLogger("bqlock").addHandler(retried)
            try:
                with self.assertRaises(bqlock.AgentUnreachable) as cm:
                    self.c1.acquire(n, wait=30, attempt_timeout=0.3)
            finally:
                logging.getLogger("bqlock").removeHandler(retried)
            self.assertTrue(cm.exception.timed_out)
            self.assertFalse(retried.once.is_set())


class _Retries(logging.Handler):
    """Notes the client's retries (it logs each at INFO)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.once = threading.Event()
        self.twice = threading.Event()
        self.count = 0
        self.request_ids: set = set()

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying with request_id" in record.getMessage():
            self.request_ids.add(record.args[-1] if isinstance(record.args, tuple) else None)
            self.count += 1
            self.once.set()
            if self.count >= 2:
                self.twice.set()


class TestElection(AgentTest):
    def test_campaign_leader_observe_proclaim_resign(self) -> None:
        n = lock_name("elect")
        self.assertIsNone(self.c1.leader(n))
        obs = self.c2.observe(n, ping=0.5)
        seen: "queue.Queue[bqlock.Leader]" = queue.Queue()
        errs: List[BaseException] = []

        def watch() -> None:
            try:
                for ld in obs:
                    seen.put(ld)
            except BaseException as e:
                errs.append(e)

        wt = threading.Thread(target=watch)
        wt.start()

        def next_seen(cond: Callable[[bqlock.Leader], bool], what: str) -> bqlock.Leader:
            deadline = time.monotonic() + 20
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("the observer did not see " + what)
                try:
                    ld = seen.get(timeout=left)
                except queue.Empty:
                    continue
                if cond(ld):
                    return ld

        try:
            with self.c1.campaign(n, value="one") as lead1:
                self.assertIsInstance(lead1, bqlock.Leadership)
                self.assertEqual((lead1.kind, lead1.value), ("leadership", "one"))
                self.assertTrue(lead1.is_valid())
                ld = self.c2.leader(n)
                assert ld is not None
                self.assertEqual((ld.term, ld.term_int, ld.value), (lead1.term, lead1.term_int, "one"))
                o1 = next_seen(lambda l: l.term == lead1.term and l.value == "one", "the first leader")
                lead1.proclaim("two")
                self.assertEqual(lead1.value, "two")
                o2 = next_seen(lambda l: l.value == "two", "the proclaimed value")
                self.assertEqual(o2.term, lead1.term)
                self.assertGreater(o2.rev, o1.rev)
                ld = self.c2.leader(n)
                assert ld is not None
                self.assertEqual(ld.value, "two")
                with self.assertRaises(bqlock.Timeout):
                    self.c2.campaign(n, value="x", wait=0.5)
                # A second candidate waits behind the leader...
                got: "queue.Queue[Any]" = queue.Queue()
                ct = threading.Thread(target=lambda: got.put(self.c2.campaign(n, value="three", wait=30)))
                ct.start()
                wait_until(lambda: len(waiters(self.c1, n)) == 1, 20, "the second candidate queues")
                self.assertTrue(got.empty())
                self.assertTrue(lead1.resign())
            # ...and leads once the first resigned, in a later term.
            lead2 = got.get(timeout=30)
            ct.join()
            self.assertIsInstance(lead2, bqlock.Leadership)
            self.assertGreater(lead2.term_int, lead1.term_int)
            self.assertEqual(lead1.lost_reason, "released")
            with self.assertRaises(bqlock.Lost):
                lead1.proclaim("too late")
            o3 = next_seen(lambda l: l.value == "three", "the second leader")
            self.assertEqual(o3.term, lead2.term)
            self.assertNotEqual(o3.client, o1.client)
            self.assertTrue(lead2.resign())
            wait_until(lambda: self.c1.leader(n) is None, 10, "no leader after the resignation")
        finally:
            obs.close()
            wt.join(10)
        self.assertFalse(wt.is_alive(), "closing the observer ends its iteration")
        self.assertEqual(errs, [])


class TestStatusAndHealth(AgentTest):
    def test_health(self) -> None:
        h = self.c1.health()
        self.assertEqual(h["status"], "ok")
        self.assertEqual(len(h["client_id"]), 64)
        self.assertGreaterEqual(h["servers"]["reachable"], h["servers"]["quorum"])
        self.assertNotEqual(h["client_id"], self.c2.health()["client_id"], "two identities")

    def test_status_long_poll(self) -> None:
        n = lock_name("status")
        st = self.c1.status(n)
        self.assertEqual((st.lock, st.holders, st.queue), (n, [], []))
        # Nothing changes: the long poll answers when its wait passes, with the same index.
        t0 = time.monotonic()
        s0 = self.c1.status(n, index=st.index, wait=0.5)
        self.assertTrue(s0.index != st.index or time.monotonic() - t0 >= 0.45, "the long poll did not wait")
        got: "queue.Queue[Any]" = queue.Queue()

        def poll() -> None:
            try:
                index = st.index
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    s = self.c1.status(n, index=index, wait=10)
                    if s.holders:
                        got.put(s)
                        return
                    index = s.index  # an answer is no proof of a change
                got.put(None)
            except BaseException as e:
                got.put(e)

        t = threading.Thread(target=poll)
        t.start()
        with self.c2.lock(n) as h:
            s = got.get(timeout=40)
            t.join()
            self.assertIsInstance(s, bqlock.LockStatus, s)
            self.assertGreater(s.index, st.index)
            self.assertEqual([(p.token, p.token_int, p.mode) for p in s.holders], [(h.token, h.token_int, "exclusive")])
            self.assertEqual(s.raw["lock"], n)


class TestErrors(AgentTest):
    def test_bad_requests(self) -> None:
        for call, field in [
            (lambda: self.c1.lock("bad\x01name", wait=1), "name"),
            (lambda: self.c1.acquire("bad\x01name", wait=1), "name"),
            (lambda: self.c1.lock(lock_name("e"), permits=1), "permits"),
            (lambda: self.c1.lock(lock_name("e"), ping=0.01), "ping"),
            (lambda: self.c1.acquire(lock_name("e"), request_id="x" * 200), "request_id"),
            (lambda: self.c1.leader("bad\x01name"), "name"),
        ]:
            with self.assertRaises(bqlock.BadRequest) as cm:
                call()
            e = cm.exception
            self.assertEqual((e.code, e.status, e.field), ("bad_request", 400, field), str(e))
            self.assertTrue(e.message)

    def test_not_found(self) -> None:
        with self.assertRaises(bqlock.NotFound) as cm:
            self.c1.hold("h_AAAAAAAAAAAAAAAAAAAAAA")
        self.assertEqual((cm.exception.code, cm.exception.status, cm.exception.field), ("not_found", 404, "lock_id"))
        # A hold of one agent is not another's.
        with self.c1.lock(lock_name("nf")) as h:
            with self.assertRaises(bqlock.NotFound):
                self.c2.hold(h.lock_id)

    def test_timeout_and_busy(self) -> None:
        n = lock_name("busy")
        with self.c2.lock(n) as h:
            t0 = time.monotonic()
            with self.assertRaises(bqlock.Timeout) as cm:
                self.c1.lock(n, wait=0.5)
            self.assertGreaterEqual(time.monotonic() - t0, 0.45)
            self.assertEqual((cm.exception.code, cm.exception.status), ("timeout", 409))
            self.assertIn(h.token, cm.exception.waiting_for or "")
            self.assertIsInstance(cm.exception, bqlock.NotAcquired)
            with self.assertRaises(bqlock.Timeout):
                self.c1.acquire(n, wait=0.3)
            with self.assertRaises(bqlock.Busy):
                self.c1.acquire(n, try_=True)

    def test_no_leader_is_none_and_lost_proclaim(self) -> None:
        n = lock_name("noleader")
        self.assertIsNone(self.c1.leader(n))
        lead = self.c1.campaign(n, value="v")
        self.assertTrue(lead.resign())
        with self.assertRaises(bqlock.Lost) as cm:
            lead.proclaim("w")
        self.assertEqual((cm.exception.code, cm.exception.status), ("lost", 410))
        self.assertIsNotNone(cm.exception.hold)

    def test_unreachable_agent(self) -> None:
        c = bqlock.Client(socket="/nonexistent/bq-agent.sock")
        with self.assertRaises(bqlock.AgentUnreachable) as cm:
            c.health()
        self.assertIn("/nonexistent/bq-agent.sock", str(cm.exception))
        self.assertIsInstance(cm.exception, ConnectionError)
        self.assertIsInstance(cm.exception, bqlock.BqError)
        with self.assertRaises(bqlock.AgentUnreachable):
            c.lock("x")

    def test_where_the_agent_is(self) -> None:
        env = dict(os.environ)
        try:
            os.environ.pop("BQ_AGENT_SOCKET", None)
            with self.assertRaises(ValueError) as cm:
                bqlock.Client()
            self.assertIn("BQ_AGENT_SOCKET", str(cm.exception))
            os.environ["BQ_AGENT_SOCKET"] = self.c1.where
            self.assertEqual(bqlock.Client().health()["status"], "ok")
        finally:
            os.environ.clear()
            os.environ.update(env)
        with self.assertRaises(ValueError):
            bqlock.Client(url="http://127.0.0.1:1")  # no token
        with self.assertRaises(ValueError):
            bqlock.Client(socket="/x", url="http://127.0.0.1:1", token="t")


class TestTCP(unittest.TestCase):
    def setUp(self) -> None:
        assert AGENTS is not None
        if not AGENTS.url or not AGENTS.token_file:
            self.skipTest("no agent with an --http listener: BQ_TEST_AGENT_URL and BQ_TEST_AGENT_TOKEN_FILE")
        self.url, self.token_file = AGENTS.url, AGENTS.token_file

    def test_token(self) -> None:
        c = bqlock.Client(url=self.url, token_file=self.token_file)
        self.assertEqual(c.health()["status"], "ok")
        with c.lock(lock_name("tcp")) as h:
            self.assertTrue(h.is_valid())
        with self.assertRaises(bqlock.Unauthorized) as cm:
            bqlock.Client(url=self.url, token="wrong").health()
        self.assertEqual((cm.exception.code, cm.exception.status), ("unauthorized", 401))


if __name__ == "__main__":
    unittest.main()
