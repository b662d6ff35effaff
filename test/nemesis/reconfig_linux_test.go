package nemesis

import (
	"testing"
	"time"
)

// A member change while a member is cut off (docs/protocol.md change 43):
// s3 is isolated; the operator, from a namespace of its own, replaces s1 by
// a new server s4 (s0, s1 and s2 seal epoch 0; s0, s2 and s4 are q of epoch
// 1); c0 locks during the cut. Then s3 is healed: it must learn the change
// from its peers — nobody pushes it again — copy and serve epoch 1. That is
// shown by the log, and by cutting off s0, after which every lock needs s3.
// The removed s1 keeps running throughout and counts for nothing.
func TestChangeWhileAServerIsCutOff(t *testing.T) {
	c := newClusterWith(t, "s4", "op")
	c.res.note("isolate s3")
	c.topo.Isolate("s3")
	op := startProc(t, "replace", c.topo.node("op").ns, nil, bin("bqserver"), "server", "replace", "1", "--dir", c.dir,
		"--host", c.topo.node("s4").ip, "--port", "7404", "--timeout", "60s")
	// The new member starts once the epoch naming it counts: endorsed by q
	// members of epoch 0 (change 49), which the command says.
	op.waitFor(30*time.Second, 1, "epoch 1 endorsed by servers")
	s4 := startProc(t, "s4", c.topo.node("s4").ns, nil, bin("bqserver"), "run", "--dir", c.dir, "--id", "4")
	if code := op.wait(90 * time.Second); code != 0 {
		t.Fatalf("server replace exited %d:\n%s", code, op.output())
	}
	s4.waitFor(30*time.Second, 1, `msg="serving the cluster's epoch"`)
	c.res.note("epoch 1 served; s3 still cut off")
	p := c.lock("c0", lockOpts{ttl: 3 * time.Second, timeout: 20 * time.Second, hold: 10 * time.Millisecond})
	if code := c.done(p, 30*time.Second); code != 0 {
		t.Fatalf("c0, with s3 cut off after the change, exited %d:\n%s", code, p.output())
	}

	c.topo.HealAll()
	heal := c.res.note("heal s3")
	c.servers[3].waitFor(30*time.Second, 1, `msg="serving the cluster's epoch"`)
	served, _ := c.servers[3].said(`msg="serving the cluster's epoch"`)
	t.Logf("s3 serves epoch 1 %v after the heal", ms(served-heal))

	c.res.note("isolate s0: s2, s3 and s4 are exactly q of epoch 1")
	c.topo.Isolate("s0")
	p = c.lock("c1", lockOpts{ttl: 3 * time.Second, timeout: 20 * time.Second, hold: 10 * time.Millisecond, shared: true}) // a reader (change 60)
	if code := c.done(p, 30*time.Second); code != 0 {
		t.Fatalf("c1, with s0 cut off, needs s3 in epoch 1; it exited %d:\n%s", code, p.output())
	}
	c.topo.HealAll()
	c.res.note("heal")
	c.requireClean()
}
