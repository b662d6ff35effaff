package nemesis

import (
	"testing"
	"time"
)

// Shared holdings under a partition (docs/protocol.md change 60). Each
// trial: readers c0 (its command would read for a minute) and c1 (two
// seconds) are in together, writer c2 waits behind them, and c0 is cut off
// from every server 0.5–2 s later. c0 loses its holding (exit 4) and c1
// ends normally; the writer then enters with a token above both, never
// while either reader's command can still touch the resource, and the
// counter (which only the writer increments) loses nothing.
func TestIsolatedReaderAndAWriterBehind(t *testing.T) {
	c := newCluster(t)
	rng := newRand(t)
	var lossToWriter stats
	for trial := range *trials {
		t0 := mono()
		r0 := c.lock("c0", lockOpts{ttl: 3 * time.Second, hold: time.Minute, shared: true})
		s0, ok := c.waitStart("c0", t0, 15*time.Second)
		if !ok {
			t.Fatalf("trial %d: c0 did not take the free lock for reading within 15s:\n%s", trial, r0.output())
		}
		r1 := c.lock("c1", lockOpts{ttl: 3 * time.Second, timeout: 30 * time.Second, hold: 2 * time.Second, shared: true})
		s1, ok := c.waitStart("c1", t0, 15*time.Second)
		if !ok {
			t.Fatalf("trial %d: reader c1 did not enter beside reader c0 within 15s:\n%s", trial, r1.output())
		}
		w := c.lock("c2", lockOpts{ttl: 3 * time.Second, timeout: 30 * time.Second, hold: 50 * time.Millisecond})
		time.Sleep(500*time.Millisecond + time.Duration(rng.IntN(1500))*time.Millisecond) // a random phase of c0's lease
		if w.exited() {
			t.Fatalf("trial %d: the writer ended (exit %d) while two readers held the lock:\n%s", trial, w.code, w.output())
		}

		c.res.note("trial %d: isolate c0, a reader", trial)
		c.topo.Isolate("c0")
		if code := c.done(r0, 15*time.Second); code != 4 {
			t.Fatalf("trial %d: the isolated reader exited %d, want 4 (lost):\n%s", trial, code, r0.output())
		}
		lost, _ := r0.said(" lost while ")
		if code := c.done(r1, 15*time.Second); code != 0 {
			t.Errorf("trial %d: reader c1 exited %d, want 0:\n%s", trial, code, r1.output())
		}
		ws, ok := c.waitStart("c2", max(s0.NS, s1.NS), 15*time.Second)
		if !ok {
			t.Fatalf("trial %d: the writer did not enter within 15s of the readers' end:\n%s", trial, w.output())
		}
		if code := c.done(w, 15*time.Second); code != 0 {
			t.Errorf("trial %d: the writer exited %d, want 0:\n%s", trial, code, w.output())
		}
		c.topo.HealAll()
		c.res.note("trial %d: heal", trial)
		if !tokenLess(s0.Token, ws.Token) || !tokenLess(s1.Token, ws.Token) {
			t.Errorf("trial %d: the writer's token %s is not above the readers' %s and %s", trial, ws.Token, s0.Token, s1.Token)
		}
		if lost > 0 {
			lossToWriter = append(lossToWriter, time.Duration(ws.NS-lost))
		}
		rep := c.res.check()
		for _, o := range rep.Overlaps {
			if o.Later.Start >= t0 {
				t.Errorf("trial %d: %v", trial, o)
			}
		}
		if len(rep.OutOfOrder) > 0 || rep.Final != rep.Increments || len(rep.StaleWrites) > 0 || len(rep.Problems) > 0 {
			t.Errorf("trial %d: %v", trial, rep)
		}
		if t.Failed() {
			return
		}
	}
	t.Logf("%d trials: a cut-off reader's loss → the writer's start %v", *trials, lossToWriter)
}
