package transport

import (
	"errors"
	"testing"

	"github.com/bq-lock/bq/wire"
)

func memCluster(t *testing.T, n int) (*MemNetwork, []Transport, []*watcher) {
	nw := NewMemNetwork()
	var all closeAll
	t.Cleanup(all.close)
	var trs []Transport
	var ws []*watcher
	for i := range n {
		tr := all.add(nw.Server(wire.ServerID(i)))
		trs = append(trs, tr)
		ws = append(ws, watch(ServerPeer(wire.ServerID(i)).String(), tr))
	}
	for i := range n {
		for j := range n {
			if i != j {
				ws[i].next(t, "connected", connected(ServerPeer(wire.ServerID(j))))
			}
		}
	}
	return nw, trs, ws
}

// A partition drops the links both ways; what a server sends meanwhile waits
// and is delivered, in order, after Heal.
func TestMemPartitionHeal(t *testing.T) {
	nw, s, w := memCluster(t, 3)
	s0, s1, s2 := ServerPeer(0), ServerPeer(1), ServerPeer(2)
	nw.Partition(s0, s1)
	w[0].next(t, "s1 cut", disconnected(s1))
	w[1].next(t, "s0 cut", disconnected(s0))
	for i := range uint64(3) {
		if err := s[0].Send(s1, heartbeat(i)); err != nil {
			t.Fatal(err)
		}
	}
	sendRetry(t, s[0], s2, heartbeat(100))
	w[2].next(t, "s2 still reachable", isMsg(s0, seq(100)))
	nw.Heal(s0, s1)
	w[0].next(t, "s1 back", connected(s1))
	sendRetry(t, s[0], s1, heartbeat(3))
	for i := range uint64(4) {
		if got := seqOf(w[1].next(t, "message", isMsg(s0, anyMsg)).Msg); got != i {
			t.Fatalf("s1 got %d, want %d", got, i)
		}
	}
}

// Isolating a client cuts it from every server; a server cannot send to it
// until HealAll.
func TestMemIsolateClient(t *testing.T) {
	nw, s, w := memCluster(t, 2)
	key := newKey(t)
	cp := clientOf(key)
	c := nw.Client(key)
	t.Cleanup(func() { c.Close() })
	wc := watch("client", c)
	w[0].next(t, "client", connected(cp))
	nw.Isolate(cp)
	w[0].next(t, "client cut", disconnected(cp))
	w[1].next(t, "client cut", disconnected(cp))
	wc.next(t, "s0 cut", disconnected(ServerPeer(0)))
	if err := s[0].Send(cp, heartbeat(1)); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("Send to an isolated client = %v", err)
	}
	nw.HealAll()
	w[0].next(t, "client back", connected(cp))
	wc.next(t, "s0 back", connected(ServerPeer(0)))
	sendRetry(t, s[0], cp, heartbeat(2))
	wc.next(t, "message", isMsg(ServerPeer(0), seq(2)))
}

// Bounce drops and restores every link of a peer; both ends hear of it.
func TestMemBounce(t *testing.T) {
	nw, s, w := memCluster(t, 2)
	key := newKey(t)
	cp := clientOf(key)
	c := nw.Client(key)
	t.Cleanup(func() { c.Close() })
	wc := watch("client", c)
	wc.next(t, "s0", connected(ServerPeer(0)))
	w[0].next(t, "client", connected(cp))
	nw.Bounce(ServerPeer(0))
	wc.next(t, "s0 dropped", disconnected(ServerPeer(0)))
	wc.next(t, "s0 back", connected(ServerPeer(0)))
	w[0].next(t, "client dropped", disconnected(cp))
	w[0].next(t, "client back", connected(cp))
	w[0].next(t, "s1 dropped", disconnected(ServerPeer(1)))
	w[0].next(t, "s1 back", connected(ServerPeer(1)))
	w[1].next(t, "s0 dropped", disconnected(ServerPeer(0)))
	w[1].next(t, "s0 back", connected(ServerPeer(0)))
	sendRetry(t, s[1], ServerPeer(0), heartbeat(5))
	w[0].next(t, "message", isMsg(ServerPeer(1), seq(5)))
}

// The tamper hook sees the real bytes from and to whom they go, and may
// rewrite them (the receiver decodes the new bytes) or drop them.
func TestMemTamper(t *testing.T) {
	nw, s, w := memCluster(t, 2)
	s0, s1 := ServerPeer(0), ServerPeer(1)
	nw.SetTamper(func(from, to Peer, frame []byte) []byte {
		if from != s0 || to != s1 {
			return frame
		}
		m, err := wire.Decode(frame)
		if err != nil {
			t.Error(err)
			return frame
		}
		switch m.Heartbeat.Seq {
		case 1:
			return nil // dropped
		case 2:
			m.Heartbeat.Seq = 20 // rewritten
			b, err := wire.Encode(m)
			if err != nil {
				t.Error(err)
			}
			return b
		}
		return frame
	})
	for i := range uint64(4) {
		sendRetry(t, s[0], s1, heartbeat(i))
	}
	for _, want := range []uint64{0, 20, 3} {
		if got := seqOf(w[1].next(t, "message", isMsg(s0, anyMsg)).Msg); got != want {
			t.Fatalf("got %d, want %d", got, want)
		}
	}
	nw.SetTamper(nil)
	sendRetry(t, s[0], s1, heartbeat(1))
	w[1].next(t, "untampered", isMsg(s0, seq(1)))
}

// A client is bound to its key's ClientID, and one key is one client.
func TestMemClientBinding(t *testing.T) {
	nw, _, w := memCluster(t, 1)
	key := newKey(t)
	c := nw.Client(key)
	t.Cleanup(func() { c.Close() })
	sendRetry(t, c, ServerPeer(0), heartbeat(9))
	in := w[0].next(t, "message", func(in Inbound) bool { return in.Kind == EventMessage })
	if in.From != ClientPeer(wire.ClientIDOf(key.Public.Wire)) {
		t.Fatalf("message from %s", in.From)
	}
	mustPanic(t, "a second live client with one key", func() { nw.Client(key) })
	mustPanic(t, "a second live server with one id", func() { nw.Server(0) })
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}
