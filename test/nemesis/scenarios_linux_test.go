package nemesis

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	trials   = flag.Int("nemesis.trials", 3, "trials of each variant in TestIsolatedHolder and of split and heal in TestSplitServers")
	duration = flag.Duration("nemesis.duration", 20*time.Second, "how long TestFlapping flaps partitions (the long mode: -nemesis.duration 30m)")
	seedFlag = flag.Uint64("nemesis.seed", 0, "seed of the random choices (pre-cut delays, TestFlapping's schedule and commands); 0: from the clock, printed")
	termFlag = flag.String("nemesis.term", "mixed", "TestFlapping's commands: obey (stop at SIGTERM), ignore (ignore it) or mixed (one in three ignores it)")
)

// judge fails the test for every fault the checker found among the
// commands that started after since: overlaps (whether the earlier command
// obeyed SIGTERM or not), tokens out of order, lost updates. It returns how
// many overlaps it saw.
func judge(t *testing.T, rep Report, since int64) int {
	t.Helper()
	n := 0
	for _, o := range rep.Overlaps {
		if o.Later.Start < since {
			continue
		}
		n++
		t.Errorf("%v", o)
	}
	for _, o := range rep.OutOfOrder {
		if o.Later.Start >= since {
			t.Errorf("token out of order: %v started after %v", o.Later, o.Earlier)
		}
	}
	if len(rep.StaleWrites) > 0 || rep.Final != rep.Increments {
		t.Errorf("lost updates: the counter is %d after %d increments; stale writes %v", rep.Final, rep.Increments, rep.StaleWrites)
	}
	for _, p := range rep.Problems {
		t.Errorf("malformed history: %s", p)
	}
	return n
}

// newRand is the test's random source, its seed logged for a replay.
func newRand(t *testing.T) *rand.Rand {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -nemesis.seed %d)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// A holder cut off from every server loses the lock: bqclient stops its
// command and exits 4, and the next client enters with a larger token, never
// while the old command can still touch the resource. Each trial: c0 takes
// the lock (its command would sleep a minute), c1 or c2 waits behind it,
// and c0 is isolated 0.5–4 s after it entered (a random phase of its
// lease's renewals).
//
// Measured: the cut to bqclient's "lost" line, the loss to the successor's
// start, and the old command's end (or death) to the successor's start.
//
// A command that ignores SIGTERM is the hard case (issue 27, point 2):
// before docs/protocol.md change 34 bqclient sent SIGKILL a tenth of the
// TTL after the loss, and the servers handed the lock on about 220 ms after
// it, so the old command outlived its lock by about 80 ms in most trials.
// Now the loss comes a grace early and the command is dead before the
// successor starts.
func TestIsolatedHolder(t *testing.T) {
	for _, term := range []string{"obey", "ignore"} {
		t.Run("term="+term, func(t *testing.T) {
			c := newCluster(t)
			rng := newRand(t)
			var cutToLoss, lossToNext, closeToNext stats
			overlaps := 0
			for trial := range *trials {
				holder, next := "c0", clientNames[1+trial%2]
				t0 := mono()
				hp := c.lock(holder, lockOpts{ttl: 3 * time.Second, hold: time.Minute, term: term})
				hs, ok := c.waitStart(holder, t0, 15*time.Second)
				if !ok {
					t.Fatalf("trial %d: %s did not take the free lock within 15s:\n%s", trial, holder, hp.output())
				}
				// On odd trials the next is a reader (change 60): it waits
				// for the cut-off writer as a writer would.
				np := c.lock(next, lockOpts{ttl: 3 * time.Second, timeout: 30 * time.Second, hold: 50 * time.Millisecond, shared: trial%2 == 1})
				time.Sleep(500*time.Millisecond + time.Duration(rng.IntN(3500))*time.Millisecond)
				if np.exited() {
					t.Fatalf("trial %d: %s ended (exit %d) while %s held the lock:\n%s", trial, next, np.code, holder, np.output())
				}

				c.res.note("trial %d: isolate %s, the holder", trial, holder)
				c.topo.Isolate(holder)
				cut := mono()
				if code := c.done(hp, 15*time.Second); code != 4 {
					t.Fatalf("trial %d: the isolated holder exited %d, want 4 (lost):\n%s", trial, code, hp.output())
				}
				lost, ok := hp.said(" lost while ")
				if !ok {
					t.Fatalf("trial %d: the isolated holder did not say it lost the lock:\n%s", trial, hp.output())
				}
				ns, ok := c.waitStart(next, hs.NS, 15*time.Second)
				if !ok {
					t.Fatalf("trial %d: %s did not enter within 15s of the holder's loss:\n%s", trial, next, np.output())
				}
				if code := c.done(np, 15*time.Second); code != 0 {
					t.Errorf("trial %d: %s exited %d, want 0:\n%s", trial, next, code, np.output())
				}
				c.topo.HealAll()
				c.res.note("trial %d: heal", trial)
				if !tokenLess(hs.Token, ns.Token) {
					t.Errorf("trial %d: the successor's token %s is not above the holder's %s", trial, ns.Token, hs.Token)
				}

				rep := c.res.check()
				var hc Command
				for _, cm := range rep.Commands {
					if cm.Client == holder && cm.Token == hs.Token {
						hc = cm
					}
				}
				cutToLoss = append(cutToLoss, time.Duration(lost-cut))
				lossToNext = append(lossToNext, time.Duration(ns.NS-lost))
				closeToNext = append(closeToNext, time.Duration(ns.NS-hc.Close))
				t.Logf("trial %d: cut→lost %v (exit 4 at %v), lost→successor %v, holder's command closed (%s) %v before the successor started",
					trial, ms(lost-cut), ms(hp.exitNS-cut), ms(ns.NS-lost), hc.ClosedBy, ms(ns.NS-hc.Close))
				for _, o := range rep.Overlaps {
					if o.Later.Start < t0 {
						continue // an earlier trial's, reported then
					}
					overlaps++
					t.Errorf("trial %d: the holder's command outlived its lock: %v", trial, o)
				}
				if len(rep.OutOfOrder) > 0 || rep.Final != rep.Increments || len(rep.StaleWrites) > 0 || len(rep.Problems) > 0 {
					t.Errorf("trial %d: %v", trial, rep)
				}
				if t.Failed() {
					return
				}
			}
			t.Logf("term=%s, TTL 3s, %d trials: cut→lost %v; lost→successor %v; holder's command end/death→successor %v (negative: an overlap); %d overlaps",
				term, *trials, cutToLoss, lossToNext, closeToNext, overlaps)
		})
	}
}

// A holder cut off from every server for a little less than it takes to
// lose the lock (0.8–1.15 s, TTL 2 s), then healed: the heal comes around
// the moment its lease guarantee lapses. Whether it keeps the lock or loses
// it, its command (which ignores SIGTERM) must be dead before the next
// client starts. Each trial: c0 holds for 2.5 s, c1 waits behind it.
//
// Before docs/protocol.md change 34 the next client entered about 10 ms
// after bqclient reported the loss (its Exit went at once) and the old
// command, SIGKILLed 100 ms after the loss, outlived its lock by about
// 90 ms; now bqclient releases only once CMD is reaped (change 39).
// Measured: the heal to the loss, the loss to the successor's start, the
// old command's end or death to the successor's start.
func TestHolderHealedAroundItsLoss(t *testing.T) {
	const ttl = 2 * time.Second
	c := newCluster(t)
	rng := newRand(t)
	var lossToNext, closeToNext stats
	losses, overlaps := 0, 0
	for trial := range *trials + 3 {
		t0 := mono()
		hp := c.lock("c0", lockOpts{ttl: ttl, hold: 2500 * time.Millisecond, term: "ignore"})
		hs, ok := c.waitStart("c0", t0, 15*time.Second)
		if !ok {
			t.Fatalf("trial %d: c0 did not take the free lock within 15s:\n%s", trial, hp.output())
		}
		np := c.lock("c1", lockOpts{ttl: ttl, timeout: 30 * time.Second, hold: 50 * time.Millisecond, shared: trial%2 == 1}) // a reader on odd trials (change 60)
		time.Sleep(time.Duration(100+rng.IntN(500)) * time.Millisecond)
		d := time.Duration(800+rng.IntN(350)) * time.Millisecond
		c.res.note("trial %d: isolate c0, the holder, for %v", trial, d)
		c.topo.Isolate("c0")
		time.Sleep(d)
		c.topo.HealAll()
		heal := c.res.note("trial %d: heal", trial)
		code := c.done(hp, 15*time.Second)
		if code != 0 && code != 4 {
			t.Fatalf("trial %d: c0 exited %d, want 0 (kept the lock) or 4 (lost it):\n%s", trial, code, hp.output())
		}
		ns, ok := c.waitStart("c1", hs.NS, 15*time.Second)
		if !ok {
			t.Fatalf("trial %d: c1 did not enter within 15s of c0's end:\n%s", trial, np.output())
		}
		if code := c.done(np, 15*time.Second); code != 0 {
			t.Errorf("trial %d: c1 exited %d, want 0:\n%s", trial, code, np.output())
		}
		if !tokenLess(hs.Token, ns.Token) {
			t.Errorf("trial %d: the successor's token %s is not above the holder's %s", trial, ns.Token, hs.Token)
		}
		rep := c.res.check()
		var hc Command
		for _, cm := range rep.Commands {
			if cm.Token == hs.Token {
				hc = cm
			}
		}
		closeToNext = append(closeToNext, time.Duration(ns.NS-hc.Close))
		if lost, ok := hp.said(" lost while "); ok {
			losses++
			lossToNext = append(lossToNext, time.Duration(ns.NS-lost))
			t.Logf("trial %d: cut %v; c0 lost the lock %v after the heal; c1 entered %v after the loss; c0's command closed (%s) %v before c1 started",
				trial, d, ms(lost-heal), ms(ns.NS-lost), hc.ClosedBy, ms(ns.NS-hc.Close))
		} else {
			t.Logf("trial %d: cut %v; c0 kept the lock (exit %d); c1 entered %v after c0's command ended", trial, d, code, ms(ns.NS-hc.Close))
		}
		overlaps += judge(t, rep, t0)
		if t.Failed() {
			return
		}
	}
	t.Logf("holder cut 0.8–1.15 s then healed, TTL 2s, %d trials, the lock lost in %d: loss→successor %v; holder's command end/death→successor %v (negative: an overlap); %d overlaps",
		*trials+3, losses, lossToNext, closeToNext, overlaps)
}

// One server cut off changes nothing for the clients: with each server
// isolated in turn, 5 locks each (every other one a reader's), 20 of 20
// locks succeed.
func TestIsolatedServer(t *testing.T) {
	c := newCluster(t)
	var took stats
	ok := 0
	for i, s := range serverNames {
		c.res.note("isolate %s", s)
		c.topo.Isolate(s)
		for j := range 5 {
			client := clientNames[(i*5+j)%len(clientNames)]
			t0 := mono()
			// Every other lock is a reader's (docs/protocol.md change 60).
			p := c.lock(client, lockOpts{ttl: 3 * time.Second, timeout: 10 * time.Second, hold: 10 * time.Millisecond, shared: j%2 == 1})
			if code := c.done(p, 20*time.Second); code != 0 {
				t.Errorf("%s isolated: lock %d by %s exited %d, want 0:\n%s", s, j, client, code, p.output())
				continue
			}
			ok++
			if st, found := c.waitStart(client, t0, 0); found {
				took = append(took, time.Duration(st.NS-t0))
			}
		}
		c.topo.HealAll()
		c.res.note("heal %s", s)
	}
	c.requireClean()
	t.Logf("%d of 20 locks with one server isolated (each in turn); bqclient started→command started %v", ok, took)
	if ok != 20 {
		t.Errorf("%d of 20 locks succeeded with one server isolated", ok)
	}
}

// A 2|2 split of the servers: a client on either side (`lock --try`, c1's
// as a reader) gets
// "unavailable" (exit 5) within a few seconds, and once the split heals a
// client started at the heal takes the lock well within the TTL (0.15 s
// alone).
func TestSplitServers(t *testing.T) {
	c := newCluster(t)
	a, b := []string{"s0", "s1", "c0"}, []string{"s2", "s3", "c1"}
	var toUnavailable, healToLock stats
	for trial := range *trials {
		c.res.note("trial %d: split %v | %v", trial, a, b)
		c.topo.Partition(a, b)
		cut := mono()
		p0 := c.lock("c0", lockOpts{ttl: 3 * time.Second, try: true, hold: 10 * time.Millisecond})
		p1 := c.lock("c1", lockOpts{ttl: 3 * time.Second, try: true, hold: 10 * time.Millisecond, shared: true}) // a reader (change 60)
		for _, p := range []*proc{p0, p1} {
			code := c.done(p, 30*time.Second)
			took := time.Duration(p.exitNS - cut)
			toUnavailable = append(toUnavailable, took)
			if code != 5 {
				t.Errorf("trial %d: %s, in a 2|2 split, exited %d, want 5 (unavailable):\n%s", trial, p.name, code, p.output())
			} else if took > 5*time.Second {
				t.Errorf("trial %d: %s, in a 2|2 split, took %v to say unavailable, want a few seconds:\n%s", trial, p.name, ms(int64(took)), p.output())
			}
		}
		if t.Failed() {
			return
		}
		c.topo.HealAll()
		heal := c.res.note("trial %d: heal", trial)
		client := clientNames[trial%2]
		p := c.lock(client, lockOpts{ttl: 3 * time.Second, timeout: 10 * time.Second, hold: 10 * time.Millisecond})
		st, ok := c.waitStart(client, heal, 15*time.Second)
		if code := c.done(p, 20*time.Second); code != 0 || !ok {
			t.Fatalf("trial %d: after the heal %s exited %d, want 0:\n%s", trial, client, code, p.output())
		}
		d := time.Duration(st.NS - heal)
		healToLock = append(healToLock, d)
		t.Logf("trial %d: exit 5 after %v and %v; a lock %v after the heal", trial, ms(p0.exitNS-cut), ms(p1.exitNS-cut), ms(int64(d)))
		// Alone, 0.14–0.17 s; beside the other packages of the README's
		// go test -race ./... on 2 cores a fresh process waits for the CPU,
		// and 1.14 s was seen. 2.5 s is below the clients' 3 s TTL: a lock
		// that waited for a stale attempt's lease to run out still fails.
		if d > 2500*time.Millisecond {
			t.Errorf("trial %d: the first lock after the heal took %v, want at most 2.5s", trial, ms(int64(d)))
		}
	}
	c.requireClean()
	t.Logf("2|2 split, %d trials: exit 5 %v after the split; heal→lock %v (a fresh bqclient started at the heal)", *trials, toUnavailable, healToLock)
}

// A client that starts `lock --ttl 2s --timeout 30s` while it reaches only
// two servers (no quorum), is then cut off from all of them until those two
// suspect it (its session's lease ran out there, as the status shows) and
// healed must take the free lock within TTL+1s of the heal (issue 27,
// point 3: before docs/protocol.md change 34 it never did, and said "4 of
// 4 servers answered, need 3" at its --timeout). It must never enter
// without a quorum. The control: a client cut off from the start and
// healed enters within TTL+1s too. If the client does not recover, the
// test ends it with SIGTERM (it says what it waited for) and checks that a
// fresh client takes the lock at once: the lock was free all along.
func TestMinorityThenCutOffClient(t *testing.T) {
	const ttl = 2 * time.Second
	// minorityPhase is how long c0 reaches s0 and s1 alone before it is cut
	// off: its connections and its session's opening there take tens of
	// milliseconds. No status shows a session that holds nothing before a
	// server suspects it, so this one is a bound; the wait for the
	// suspicion below checks that the session reached both servers.
	const minorityPhase = time.Second
	for _, minority := range []bool{false, true} {
		name := map[bool]string{false: "control=cut-off-from-the-start", true: "minority-then-cut-off"}[minority]
		t.Run(name, func(t *testing.T) {
			c := newCluster(t)
			id := c.clientID("c0")
			if minority {
				c.res.note("c0 reaches only s0, s1")
				c.topo.Partition([]string{"c0"}, []string{"s2", "s3"})
			} else {
				c.res.note("isolate c0")
				c.topo.Isolate("c0")
			}
			t0 := mono()
			p := c.lock("c0", lockOpts{ttl: ttl, timeout: 30 * time.Second, hold: 50 * time.Millisecond})
			if minority {
				time.Sleep(minorityPhase)
				c.res.note("isolate c0")
				c.topo.Isolate("c0")
				// The state the scenario needs (change 34): the two servers
				// c0 reached suspect its session, as c1 (which reaches every
				// server) sees in the lock's status. Their leases run out one
				// TTL after c0's last heartbeat.
				st := c.waitStatus("c1", 5*ttl, "c0 suspected by s0 and s1", func(st lockStatus) bool { return st.suspectedBy(id) >= 2 })
				c.res.note("c0 suspected by %d servers", st.suspectedBy(id))
			} else {
				// Nothing of c0 reaches a server, so no state shows the cut:
				// it lasts as long as the minority case's at most takes to
				// show its state (its minority phase, then one TTL until the
				// session's lease runs out at s0 and s1), and a TTL more.
				// The negative check below needs that elapsed time by nature.
				time.Sleep(minorityPhase + 2*ttl)
			}
			if st, ok := c.waitStart("c0", t0, 0); ok {
				t.Fatalf("c0 entered at %v without reaching a quorum of servers: %v", ms(st.NS-t0), st)
			}
			if p.exited() {
				c.recordExit(p)
				t.Fatalf("c0 ended (exit %d) before the heal, within its --timeout:\n%s", p.code, p.output())
			}
			c.topo.HealAll()
			heal := c.res.note("heal")
			st, ok := c.waitStart("c0", t0, ttl+time.Second+2*time.Second)
			switch {
			case ok && time.Duration(st.NS-heal) <= ttl+time.Second:
				t.Logf("%s: c0 entered %v after the heal", name, ms(st.NS-heal))
			case ok:
				t.Errorf("c0 entered %v after the heal, want at most TTL+1s (%v)", ms(st.NS-heal), ttl+time.Second)
			default:
				t.Errorf("c0 did not enter within %v of the heal, want at most TTL+1s (%v)", ms(mono()-heal), ttl+time.Second)
			}
			if ok {
				if code := c.done(p, 10*time.Second); code != 0 {
					t.Errorf("c0 exited %d, want 0:\n%s", code, p.output())
				}
			} else {
				// Given up: SIGTERM ends a waiting bqclient within a second, and
				// it says what it waited for.
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-p.done:
				case <-time.After(3 * time.Second):
				}
				p.finish()
				c.recordExit(p)
				t.Logf("c0 given up with SIGTERM: exit %d: %s", p.code, strings.TrimSpace(p.output()))
				// The lock was free all along: a fresh client takes it at once.
				t1 := mono()
				q := c.lock("c1", lockOpts{ttl: ttl, timeout: 10 * time.Second, hold: 10 * time.Millisecond})
				if code := c.done(q, 20*time.Second); code != 0 {
					t.Errorf("c1 after the heal exited %d, want 0:\n%s", code, q.output())
				} else if st, ok := c.waitStart("c1", t1, 0); ok {
					t.Logf("a fresh c1 started after c0 was given up took the lock %v after it started", ms(st.NS-t1))
				}
			}
			c.requireClean()
		})
	}
}

// Flapping partitions under three looping clients: every 0.5–3 s every cut
// heals and a random one is made (one server isolated, one client isolated,
// one of each, or none; a client cut is the holder's half the time), for
// -nemesis.duration. Each client loops `lock --ttl 2s --timeout 10s -- CMD`
// (with --shared one time in three: a reader, change 60),
// CMD holding 20–600 ms, or 1.5–4 s one time in four, and obeying SIGTERM
// or ignoring it (-nemesis.term; mixed: one in three ignores it). At the
// end the checker must find no overlap, no token out of order and no lost
// update, whether the earlier command obeyed SIGTERM or not (30-minute runs
// with -nemesis.term ignore: 31 overlaps before change 34, 3 and 2 before
// changes 39 and 40, none after). Exit
// codes are reported: 0 (done), 3 (timed out behind a holder), 4 (lost),
// 5 (unavailable) are what partitions cause; any other fails the test, and
// so does a loop still running a minute after the last heal.
func TestFlapping(t *testing.T) {
	if *termFlag != "obey" && *termFlag != "ignore" && *termFlag != "mixed" {
		t.Fatalf("-nemesis.term %q: want obey, ignore or mixed", *termFlag)
	}
	if dl, ok := t.Deadline(); ok && time.Until(dl) < *duration+time.Minute {
		t.Fatalf("-nemesis.duration %v does not fit in go test's -timeout (%v left): give -timeout at least %v", *duration, time.Until(dl).Round(time.Second), *duration+3*time.Minute)
	}
	c := newCluster(t)
	rng := newRand(t)
	var mu sync.Mutex
	codes := map[string]map[int]int{}
	var odd []string // runs that ended in a code partitions cannot explain
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, client := range clientNames {
		codes[client] = map[int]int{}
		crng := rand.New(rand.NewPCG(rng.Uint64(), uint64(i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				term := *termFlag
				if term == "mixed" {
					term = []string{"obey", "obey", "ignore"}[crng.IntN(3)]
				}
				// Mostly short holds; one in four long enough for a cut to
				// make the holder lose the lock.
				hold := time.Duration(20+crng.IntN(580)) * time.Millisecond
				if crng.IntN(4) == 0 {
					hold = time.Duration(1500+crng.IntN(2500)) * time.Millisecond
				}
				// One run in three is a reader (docs/protocol.md change 60):
				// readers overlap readers, never a writer, whatever the cuts.
				shared := crng.IntN(3) == 0
				p, err := c.start(client, lockOpts{ttl: 2 * time.Second, timeout: 10 * time.Second, hold: hold, term: term, shared: shared})
				if err != nil {
					mu.Lock()
					odd = append(odd, err.Error())
					mu.Unlock()
					return
				}
				select {
				case <-p.done:
				case <-time.After(30 * time.Second):
				}
				p.finish()
				c.recordExit(p)
				mu.Lock()
				codes[client][p.code]++
				if p.code != 0 && p.code != 3 && p.code != 4 && p.code != 5 {
					odd = append(odd, fmt.Sprintf("%s exited %d:\n%s", client, p.code, tail(p.output(), 4<<10)))
				}
				mu.Unlock()
			}
		}()
	}

	// A client to cut: half the time the one holding the lock, if any.
	pickClient := func() string {
		if h := c.holder(); h != "" && rng.IntN(2) == 0 {
			return h
		}
		return clientNames[rng.IntN(len(clientNames))]
	}
	faults := 0
	end := time.Now().Add(*duration)
	for time.Now().Before(end) {
		c.topo.HealAll()
		var cut []string
		switch r := rng.IntN(10); {
		case r < 4:
			cut = []string{serverNames[rng.IntN(len(serverNames))]}
		case r < 7:
			cut = []string{pickClient()}
		case r < 9:
			cut = []string{serverNames[rng.IntN(len(serverNames))], pickClient()}
		}
		for _, n := range cut {
			c.topo.Isolate(n)
		}
		hold := time.Duration(500+rng.IntN(2500)) * time.Millisecond
		c.res.note("fault %d: isolate %v for %v", faults, cut, hold)
		faults++
		time.Sleep(hold)
	}
	c.topo.HealAll()
	c.res.note("heal, stop")
	close(stop)
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(time.Minute):
		t.Fatalf("the client loops did not end within a minute of the last heal (liveness)")
	}

	rep := c.res.check()
	var byCode []string
	total := map[int]int{}
	for _, client := range clientNames {
		var cs []string
		for code, n := range codes[client] {
			cs = append(cs, fmt.Sprintf("exit %d: %d", code, n))
			total[code] += n
		}
		sort.Strings(cs)
		byCode = append(byCode, fmt.Sprintf("%s {%s}", client, strings.Join(cs, ", ")))
	}
	killed := 0
	for _, cm := range rep.Commands {
		if cm.ClosedBy != "end" || cm.How == "term" {
			killed++
		}
	}
	t.Logf("%v of flapping partitions (%d faults), commands %s: %d acquisitions (%d stopped by a loss), %d increments, counter %d; %s",
		*duration, faults, *termFlag, len(rep.Commands), killed, rep.Increments, rep.Final, strings.Join(byCode, "; "))
	for _, o := range odd {
		t.Errorf("unexpected: %s", o)
	}
	var closeToNext stats // a command stopped by a loss: its end or death → the next start
	for i, cm := range rep.Commands {
		if (cm.ClosedBy != "end" || cm.How == "term") && i+1 < len(rep.Commands) {
			closeToNext = append(closeToNext, time.Duration(rep.Commands[i+1].Start-cm.Close))
		}
	}
	t.Logf("overlaps: %d, tokens out of order: %d, lost updates: %d; a command stopped by a loss ended or died %v before the next one started",
		len(rep.Overlaps), len(rep.OutOfOrder), rep.LostUpdates(), closeToNext)
	judge(t, rep, 0)
	if min := int(*duration / (4 * time.Second)); len(rep.Commands) < min {
		t.Errorf("%d acquisitions in %v, want at least %d (progress)", len(rep.Commands), *duration, min)
	}
	if total[0] == 0 {
		t.Errorf("no command ran to its end")
	}
}
