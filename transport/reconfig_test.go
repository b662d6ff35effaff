package transport

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/bq-lock/bq/wire"
	"go.uber.org/goleak"
)

// Reconfiguration (docs/protocol.md change 43): SetServers changes the
// servers a running node talks to.

// linkEvents lists the EventConnected and EventDisconnected about p that w saw, in order.
func linkEvents(w *watcher, p Peer) []EventKind {
	var ks []EventKind
	for _, in := range w.all() {
		if in.From == p && (in.Kind == EventConnected || in.Kind == EventDisconnected) {
			ks = append(ks, in.Kind)
		}
	}
	return ks
}

func wantLinkEvents(t *testing.T, w *watcher, p Peer, want ...EventKind) {
	t.Helper()
	if got := linkEvents(w, p); !slices.Equal(got, want) {
		t.Fatalf("%s: events about %s: %v, want %v; saw:\n%s", w.name, p, got, want, w.dump())
	}
}

// waitDone waits for a stopped dialer's goroutine to return.
func waitDone(t *testing.T, d *dialer) {
	t.Helper()
	select {
	case <-d.done:
	case <-time.After(waitTimeout):
		t.Fatalf("the dialer of %s did not stop", d.id)
	}
}

// subset is the part of all with the given ids.
func subset(all map[wire.ServerID]string, ids ...wire.ServerID) map[wire.ServerID]string {
	m := make(map[wire.ServerID]string)
	for _, id := range ids {
		m[id] = all[id]
	}
	return m
}

// A server started with peers {s1} is given {s1, s2} (and its own id, which
// is ignored): it dials s2 and talks to it. Given {s2}, it lets s1 go — an
// EventDisconnected, Send is ErrUnknownPeer, s1's accepted connection from
// it closes with the reason, the dialer's goroutine exits, and it closes and
// then refuses s1's own connection — and still talks to s2.
func TestQUICSetServersServer(t *testing.T) {
	qc := newQUICCluster(t, 3, Limits{})
	s0, s1, s2 := ServerPeer(0), ServerPeer(1), ServerPeer(2)
	cfg := qc.cfg(0)
	cfg.Peers = subset(qc.peers, 1)
	a := qc.listen(t, cfg)
	b := qc.listen(t, qc.cfg(1))
	c := qc.listen(t, qc.cfg(2))
	wa, wb, wc := watch("s0", a), watch("s1", b), watch("s2", c)
	wa.next(t, "connected s1", connected(s1))
	wb.next(t, "connected s0", connected(s0))
	qc.sink.wait(t, "node=s0", "refused a server connection", "s2 is not a peer of this server")
	if err := a.Send(s2, heartbeat(1)); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("Send to s2 before SetServers = %v, want ErrUnknownPeer", err)
	}

	a.(Reconfigurable).SetServers(qc.peers) // s0's own entry is ignored
	wa.next(t, "connected s2", connected(s2))
	sendRetry(t, a, s2, heartbeat(2))
	wc.next(t, "s0's message", isMsg(s0, seq(2)))
	sendRetry(t, c, s0, heartbeat(3)) // s0 now accepts s2's connection
	wa.next(t, "s2's message", isMsg(s2, seq(3)))

	toB := a.(*node).peers()[1]
	a.(Reconfigurable).SetServers(subset(qc.peers, 2))
	wa.next(t, "s1 let go", disconnected(s1))
	waitDone(t, toB)
	if err := a.Send(s1, heartbeat(4)); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("Send to a removed server = %v, want ErrUnknownPeer", err)
	}
	qc.sink.wait(t, "node=s1", "accepted server connection closed", "peer=s0", "no longer a member")
	b.(*node).mu.Lock()
	_, in := b.(*node).srvIn[0]
	b.(*node).mu.Unlock()
	if in {
		t.Fatal("s1 still holds a connection from s0")
	}
	// s1's own link to s0 is closed too, and refused from then on.
	wb.next(t, "s0 closed s1's link", disconnected(s0))
	qc.sink.wait(t, "node=s0", "refused a server connection", "s1 is not a peer of this server")

	sendRetry(t, a, s2, heartbeat(5))
	wc.next(t, "s0's message after s1 left", isMsg(s0, seq(5)))
	sendRetry(t, c, s0, heartbeat(6))
	wa.next(t, "s2's message after s1 left", isMsg(s2, seq(6)))
	wantLinkEvents(t, wa, s2, EventConnected)
	wantLinkEvents(t, wa, s1, EventConnected, EventDisconnected)
}

// A client given another set of servers dials the new one and lets the
// removed one go; the one it keeps keeps its connection.
func TestQUICSetServersClient(t *testing.T) {
	qc := newQUICCluster(t, 3, Limits{})
	s0, s1, s2 := ServerPeer(0), ServerPeer(1), ServerPeer(2)
	var srv []Transport
	var ws []*watcher
	for i := range 3 {
		srv = append(srv, qc.listen(t, qc.cfg(i)))
		ws = append(ws, watch(ServerPeer(wire.ServerID(i)).String(), srv[i]))
	}
	key := newKey(t)
	cp := clientOf(key)
	ccfg := qc.clientConfig(key)
	ccfg.Servers = subset(qc.peers, 0, 1)
	c, err := DialClient(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	qc.all.add(c)
	wc := watch("client", c)
	wc.next(t, "connected s0", connected(s0))
	wc.next(t, "connected s1", connected(s1))
	if err := c.Send(s2, heartbeat(1)); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("Send to s2 before SetServers = %v, want ErrUnknownPeer", err)
	}

	c.(Reconfigurable).SetServers(subset(qc.peers, 1, 2))
	wc.next(t, "connected s2", connected(s2))
	wc.next(t, "s0 let go", disconnected(s0))
	ws[0].next(t, "client gone", disconnected(cp))
	ws[2].next(t, "client connected", connected(cp))
	if err := c.Send(s0, heartbeat(2)); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("Send to a removed server = %v, want ErrUnknownPeer", err)
	}
	sendRetry(t, c, s2, heartbeat(3))
	ws[2].next(t, "the client's message", isMsg(cp, seq(3)))
	sendRetry(t, srv[2], cp, heartbeat(4))
	wc.next(t, "s2's reply", isMsg(s2, seq(4)))
	sendRetry(t, c, s1, heartbeat(5))
	ws[1].next(t, "the client's message to the kept server", isMsg(cp, seq(5)))
	wantLinkEvents(t, wc, s1, EventConnected)
	wantLinkEvents(t, ws[1], cp, EventConnected)
	wantLinkEvents(t, wc, s0, EventConnected, EventDisconnected)
}

// A server whose address changes is let go at the old one and dialed at the
// new one, in that order: EventDisconnected, then EventConnected.
func TestQUICSetServersAddressChange(t *testing.T) {
	qc := newQUICCluster(t, 2, Limits{})
	s0, s1 := ServerPeer(0), ServerPeer(1)
	a := qc.listen(t, qc.cfg(0))
	wa := watch("s0", a)
	// s1 at its old address and at its new one: the same certificate. Both
	// accept s0 but dial it where it is not, so that the two do not take
	// turns at replacing each other's link to it.
	old := qc.cfg(1)
	old.Peers = map[wire.ServerID]string{0: freeAddrs(t, 1)[0]}
	wOld := watch("s1 old", qc.listen(t, old))
	moved := old
	moved.ListenAddr = freeAddrs(t, 1)[0]
	wNew := watch("s1 new", qc.listen(t, moved))

	wa.next(t, "connected s1", connected(s1))
	sendRetry(t, a, s1, heartbeat(1))
	wOld.next(t, "s0's message at the old address", isMsg(s0, seq(1)))

	a.(Reconfigurable).SetServers(map[wire.ServerID]string{1: moved.ListenAddr})
	wa.next(t, "s1 let go at its old address", disconnected(s1))
	wa.next(t, "s1 dialed at its new address", connected(s1))
	wantLinkEvents(t, wa, s1, EventConnected, EventDisconnected, EventConnected)
	qc.sink.wait(t, "accepted server connection closed", "peer=s0", "address changed")
	sendRetry(t, a, s1, heartbeat(2))
	wNew.next(t, "s0's message at the new address", isMsg(s0, seq(2)))
	noEventFrom(t, wNew, ServerPeer(1))
	for _, in := range wOld.all() {
		if in.Kind == EventMessage && seqOf(in.Msg) == 2 {
			t.Fatalf("the old address got %s", in)
		}
	}
}

// What was queued for a server that is let go is dropped: named again, it
// gets only what is sent from then on.
func TestQUICSetServersDropsQueue(t *testing.T) {
	qc := newQUICCluster(t, 2, Limits{})
	s0, s1 := ServerPeer(0), ServerPeer(1)
	a := qc.listen(t, qc.cfg(0))
	wa := watch("s0", a)
	for i := range uint64(3) { // s1 is not up: these wait in its queue
		if err := a.Send(s1, heartbeat(i)); err != nil {
			t.Fatal(err)
		}
	}
	a.(Reconfigurable).SetServers(nil)
	if err := a.Send(s1, heartbeat(3)); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("Send to a removed server = %v, want ErrUnknownPeer", err)
	}
	a.(Reconfigurable).SetServers(qc.peers)
	wb := watch("s1", qc.listen(t, qc.cfg(1)))
	wa.next(t, "connected s1", connected(s1))
	sendRetry(t, a, s1, heartbeat(100))
	if got := seqOf(wb.next(t, "s0's first message", isMsg(s0, anyMsg)).Msg); got != 100 {
		t.Fatalf("s1 got message %d first, want 100 (the ones queued before s1 was let go are dropped)", got)
	}
}

// SetServers after Close does nothing, and neither the dialers it started
// and stopped nor Close leave a goroutine behind.
func TestQUICSetServersAfterClose(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	qc := newQUICCluster(t, 3, Limits{})
	s2 := ServerPeer(2)
	a := qc.listen(t, qc.cfg(0))
	b := qc.listen(t, qc.cfg(1))
	key := newKey(t)
	c := qc.dial(t, key)
	wa, wc := watch("s0", a), watch("client", c)
	wa.next(t, "connected s1", connected(ServerPeer(1)))
	wc.next(t, "connected s0", connected(ServerPeer(0)))
	wc.next(t, "connected s1", connected(ServerPeer(1)))
	a.(Reconfigurable).SetServers(subset(qc.peers, 1))
	c.(Reconfigurable).SetServers(subset(qc.peers, 0))
	wc.next(t, "s1 let go", disconnected(ServerPeer(1)))
	a.(Reconfigurable).SetServers(qc.peers)
	c.(Reconfigurable).SetServers(qc.peers)
	for _, tr := range []Transport{c, a, b} {
		tr.Close()
	}
	before := maps.Clone(a.(*node).peers())
	a.(Reconfigurable).SetServers(subset(qc.peers, 2))
	c.(Reconfigurable).SetServers(nil)
	if after := a.(*node).peers(); !maps.Equal(before, after) {
		t.Fatalf("SetServers after Close changed the dialers: %v, then %v", before, after)
	}
	if err := a.Send(s2, heartbeat(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
	goleak.VerifyNone(t, ignore)
}

// The memory network: a server given another set of servers talks to those
// only, both ways; a client too; a changed address re-dials.
func TestMemSetServers(t *testing.T) {
	nw, s, w := memCluster(t, 3)
	s0, s1, s2 := ServerPeer(0), ServerPeer(1), ServerPeer(2)
	addrs := map[wire.ServerID]string{0: "a0", 1: "a1", 2: "a2"}
	a := s[0].(Reconfigurable)

	a.SetServers(subset(addrs, 0, 2))
	w[0].next(t, "s1 let go", disconnected(s1))
	w[1].next(t, "s0 closed s1's link", disconnected(s0))
	if err := s[0].Send(s1, heartbeat(1)); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("Send to a removed server = %v, want ErrUnknownPeer", err)
	}
	sendRetry(t, s[0], s2, heartbeat(2))
	w[2].next(t, "s0's message", isMsg(s0, seq(2)))
	wantLinkEvents(t, w[0], s2, EventConnected)

	a.SetServers(addrs)
	w[0].next(t, "s1 back", connected(s1))
	w[1].next(t, "s0 back", connected(s0))
	sendRetry(t, s[0], s1, heartbeat(3))
	w[1].next(t, "s0's message", isMsg(s0, seq(3)))

	moved := maps.Clone(addrs)
	moved[2] = "a2'"
	a.SetServers(moved)
	w[0].next(t, "s2 let go at its old address", disconnected(s2))
	w[0].next(t, "s2 dialed at its new address", connected(s2))
	wantLinkEvents(t, w[0], s2, EventConnected, EventDisconnected, EventConnected)
	wantLinkEvents(t, w[0], s1, EventConnected, EventDisconnected, EventConnected)

	key := newKey(t)
	cp := clientOf(key)
	c := nw.Client(key)
	defer c.Close()
	wc := watch("client", c)
	for i := range 3 {
		wc.next(t, "connected", connected(ServerPeer(wire.ServerID(i))))
	}
	c.(Reconfigurable).SetServers(subset(addrs, 1, 2))
	wc.next(t, "s0 let go", disconnected(s0))
	w[0].next(t, "client gone", disconnected(cp))
	if err := c.Send(s0, heartbeat(4)); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("Send to a removed server = %v, want ErrUnknownPeer", err)
	}
	sendRetry(t, c, s1, heartbeat(5))
	w[1].next(t, "the client's message", isMsg(cp, seq(5)))
	wantLinkEvents(t, wc, s1, EventConnected)

	s[0].Close()
	a.SetServers(nil) // harmless
}

// A cluster CA rotation (change 43): a member's certificate issued by the
// next CA is refused until the node is given a pool that holds it
// (SetCAPool), and taken after.
func TestQUICSetCAPool(t *testing.T) {
	qc := newQUICCluster(t, 2, Limits{})
	next := newPKI(t, 0)
	qc.pki.certs[1] = next.issue(t, 1) // server 1 joined under the next CA
	both := qc.pki.pool.Clone()
	both.AddCert(next.ca.Cert)
	cfg1 := qc.cfg(1)
	cfg1.CAPool = both
	s0 := qc.listen(t, qc.cfg(0))
	qc.listen(t, cfg1)
	w := watch("s0", s0)
	qc.sink.wait(t, "cannot connect to server", "s1", "not issued by the cluster CA")
	s0.(Retrustable).SetCAPool(both)
	w.next(t, "connected s1 under the pool with the next CA", connected(ServerPeer(1)))
}
