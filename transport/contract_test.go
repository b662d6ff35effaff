package transport

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// The contract every Transport keeps, run against both implementations
//: the in-memory network and QUIC on loopback.

// testNet is a cluster of n servers on one implementation.
type testNet struct {
	servers   []Transport
	newClient func(key *crypto.PrivateKey) Transport
	// restart brings server i back after servers[i].Close (same address).
	restart func(i int) Transport
	// corrupt turns the next frame that from (whose transport is tr) sends
	// to `to` into bytes that do not decode.
	corrupt func(from Peer, tr Transport, to Peer)
	log     *logSink
}

type factory struct {
	name string
	make func(t *testing.T, n int, lim Limits) *testNet
}

var factories = []factory{
	{"mem", newMemNet},
	{"quic", newQUICNet},
}

var garbage = []byte{0xff, 0x00, 0x13, 0x37}

// oneShot returns a tamper that replaces the first frame matching with garbage.
func oneShot(match func(to Peer) bool) func(to Peer, frame []byte) []byte {
	var done atomic.Bool
	return func(to Peer, frame []byte) []byte {
		if match(to) && done.CompareAndSwap(false, true) {
			return append([]byte(nil), garbage...)
		}
		return frame
	}
}

// closeAll closes every transport made for a test, in cleanup.
type closeAll struct {
	mu  sync.Mutex
	trs []Transport
}

func (c *closeAll) add(tr Transport) Transport {
	c.mu.Lock()
	c.trs = append(c.trs, tr)
	c.mu.Unlock()
	return tr
}

func (c *closeAll) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tr := range c.trs {
		tr.Close()
	}
}

func newMemNet(t *testing.T, n int, lim Limits) *testNet {
	nw := NewMemNetwork()
	if err := nw.SetLimits(lim); err != nil {
		t.Fatal(err)
	}
	var all closeAll
	t.Cleanup(all.close)
	sink, _ := newLogSink(t)
	tn := &testNet{log: sink}
	for i := range n {
		tn.servers = append(tn.servers, all.add(nw.Server(wire.ServerID(i))))
	}
	tn.newClient = func(key *crypto.PrivateKey) Transport { return all.add(nw.Client(key)) }
	tn.restart = func(i int) Transport {
		tn.servers[i] = all.add(nw.Server(wire.ServerID(i)))
		return tn.servers[i]
	}
	tn.corrupt = func(from Peer, _ Transport, to Peer) {
		f := oneShot(func(p Peer) bool { return p == to })
		nw.SetTamper(func(fr, to Peer, frame []byte) []byte {
			if fr != from {
				return frame
			}
			return f(to, frame)
		})
	}
	return tn
}

// quicTestLimits shortens the waits of lim for tests.
func quicTestLimits(lim Limits) Limits {
	if lim.BackoffMin == 0 {
		lim.BackoffMin = 10 * time.Millisecond
	}
	if lim.BackoffMax == 0 {
		lim.BackoffMax = 200 * time.Millisecond
	}
	if lim.HandshakeTimeout == 0 {
		lim.HandshakeTimeout = 5 * time.Second
	}
	return lim
}

// quicCluster is the material of a QUIC test cluster.
type quicCluster struct {
	pki    *testPKI
	addrs  []string
	peers  map[wire.ServerID]string
	lim    Limits
	all    *closeAll
	sink   *logSink
	logger *slog.Logger
	cfg    func(i int) ServerConfig
}

func newQUICCluster(t *testing.T, n int, lim Limits) *quicCluster {
	qc := &quicCluster{pki: newPKI(t, n), addrs: freeAddrs(t, n), peers: map[wire.ServerID]string{}, lim: quicTestLimits(lim), all: &closeAll{}}
	t.Cleanup(qc.all.close)
	qc.sink, qc.logger = newLogSink(t)
	lg := qc.logger
	for i, a := range qc.addrs {
		qc.peers[wire.ServerID(i)] = a
	}
	qc.cfg = func(i int) ServerConfig {
		return ServerConfig{
			ID: wire.ServerID(i), ListenAddr: qc.addrs[i], Peers: qc.peers,
			Cert: qc.pki.certs[i], CAPool: qc.pki.pool, IdentifyServer: qc.pki.identify,
			Limits: qc.lim, Logger: lg,
		}
	}
	return qc
}

func (qc *quicCluster) listen(t *testing.T, cfg ServerConfig) Transport {
	t.Helper()
	tr, err := ListenServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return qc.all.add(tr)
}

func (qc *quicCluster) clientConfig(key *crypto.PrivateKey) ClientConfig {
	return ClientConfig{Key: key, Servers: qc.peers, CAPool: qc.pki.pool, IdentifyServer: qc.pki.identify, Limits: qc.lim, Logger: qc.logger}
}

func (qc *quicCluster) dial(t *testing.T, key *crypto.PrivateKey) Transport {
	t.Helper()
	tr, err := DialClient(qc.clientConfig(key))
	if err != nil {
		t.Fatal(err)
	}
	return qc.all.add(tr)
}

func newQUICNet(t *testing.T, n int, lim Limits) *testNet {
	qc := newQUICCluster(t, n, lim)
	tn := &testNet{log: qc.sink}
	for i := range n {
		tn.servers = append(tn.servers, qc.listen(t, qc.cfg(i)))
	}
	tn.newClient = func(key *crypto.PrivateKey) Transport { return qc.dial(t, key) }
	tn.restart = func(i int) Transport {
		tn.servers[i] = qc.listen(t, qc.cfg(i))
		return tn.servers[i]
	}
	tn.corrupt = func(_ Peer, tr Transport, to Peer) {
		f := oneShot(func(p Peer) bool { return p == to })
		tr.(*node).tamper.Store(&f)
	}
	return tn
}

func TestContract(t *testing.T) {
	for _, f := range factories {
		t.Run(f.name, func(t *testing.T) {
			t.Run("ServerServerFIFO", func(t *testing.T) { testServerFIFO(t, f) })
			t.Run("ClientRequestReply", func(t *testing.T) { testRequestReply(t, f) })
			t.Run("ConnectDisconnectEvents", func(t *testing.T) { testEvents(t, f) })
			t.Run("UnknownPeer", func(t *testing.T) { testUnknownPeer(t, f) })
			t.Run("QueueFullSlowClient", func(t *testing.T) { testQueueFullClient(t, f) })
			t.Run("QueueFullServer", func(t *testing.T) { testQueueFullServer(t, f) })
			t.Run("Close", func(t *testing.T) { testClose(t, f) })
			t.Run("BadInputFromClient", func(t *testing.T) { testBadInputClient(t, f) })
			t.Run("BadInputFromServer", func(t *testing.T) { testBadInputServer(t, f) })
			t.Run("PeerRestart", func(t *testing.T) { testRestart(t, f) })
		})
	}
}

// seqOf is the sequence number a test put in a message.
func seqOf(m *wire.Message) uint64 {
	switch {
	case m.Heartbeat != nil:
		return m.Heartbeat.Seq
	case m.Submit != nil:
		return m.Submit.Req
	}
	return ^uint64(0)
}

func anyMsg(*wire.Message) bool { return true }

func seq(n uint64) func(*wire.Message) bool {
	return func(m *wire.Message) bool { return seqOf(m) == n }
}

// Server to server delivery is FIFO, both ways at once, for small and large messages.
func testServerFIFO(t *testing.T, f factory) {
	tn := f.make(t, 3, Limits{})
	s0, s1 := ServerPeer(0), ServerPeer(1)
	w0, w1 := watch("s0", tn.servers[0]), watch("s1", tn.servers[1])
	w0.next(t, "connected s1", connected(s1))
	w1.next(t, "connected s0", connected(s0))
	const n = 1500
	big := bigSubmit(t, 0, 4<<10)
	msg := func(i uint64) *wire.Message {
		if i%10 == 0 {
			return &wire.Message{Submit: &wire.Submit{Req: i, Statement: big.Submit.Statement}}
		}
		return heartbeat(i)
	}
	for i := range uint64(n) {
		sendRetry(t, tn.servers[0], s1, msg(i))
		sendRetry(t, tn.servers[1], s0, msg(i))
	}
	for i := range uint64(n) {
		if got := seqOf(w1.next(t, "message from s0", isMsg(s0, anyMsg)).Msg); got != i {
			t.Fatalf("s1 got message %d from s0, want %d", got, i)
		}
		if got := seqOf(w0.next(t, "message from s1", isMsg(s1, anyMsg)).Msg); got != i {
			t.Fatalf("s0 got message %d from s1, want %d", got, i)
		}
	}
}

// A client's requests reach every server, and their replies reach the client.
func testRequestReply(t *testing.T, f factory) {
	tn := f.make(t, 3, Limits{})
	key := newKey(t)
	cp := clientOf(key)
	c := tn.newClient(key)
	wc := watch("client", c)
	var ws []*watcher
	for i, s := range tn.servers {
		ws = append(ws, watch(ServerPeer(wire.ServerID(i)).String(), s))
	}
	for i := range tn.servers {
		wc.next(t, "connected", connected(ServerPeer(wire.ServerID(i))))
		ws[i].next(t, "client connected", connected(cp))
	}
	for r := range uint64(20) {
		for i := range tn.servers {
			sendRetry(t, c, ServerPeer(wire.ServerID(i)), &wire.Message{SessionOpen: &wire.SessionOpen{Session: r, TTLMillis: 1000}})
		}
		for i, s := range tn.servers {
			in := ws[i].next(t, "request", isMsg(cp, func(m *wire.Message) bool { return m.SessionOpen != nil }))
			if in.Msg.SessionOpen.Session != r || in.Size == 0 {
				t.Fatalf("server %d got %s (size %d), want session %d", i, in.Msg, in.Size, r)
			}
			if err := s.Send(cp, &wire.Message{SessionAck: &wire.SessionAck{Session: r, Seq: uint64(i), LeaseOK: true}}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range tn.servers {
			in := wc.next(t, "reply", isMsg(ServerPeer(wire.ServerID(i)), func(m *wire.Message) bool { return m.SessionAck != nil }))
			if a := in.Msg.SessionAck; a.Session != r || a.Seq != uint64(i) {
				t.Fatalf("reply %s from s%d, want session %d", in.Msg, i, r)
			}
		}
	}
}

// Both ends hear of connections coming and going.
func testEvents(t *testing.T, f factory) {
	tn := f.make(t, 3, Limits{})
	var ws []*watcher
	for i, s := range tn.servers {
		ws = append(ws, watch(ServerPeer(wire.ServerID(i)).String(), s))
	}
	for i := range 3 {
		for j := range 3 {
			if i != j {
				ws[i].next(t, "server connected", connected(ServerPeer(wire.ServerID(j))))
			}
		}
	}
	key1, key2 := newKey(t), newKey(t)
	c1 := tn.newClient(key1)
	w1 := watch("c1", c1)
	for i := range 3 {
		w1.next(t, "connected", connected(ServerPeer(wire.ServerID(i))))
		ws[i].next(t, "c1 connected", connected(clientOf(key1)))
	}
	c1.Close()
	for i := range 3 {
		ws[i].next(t, "c1 disconnected", disconnected(clientOf(key1)))
	}
	c2 := tn.newClient(key2)
	w2 := watch("c2", c2)
	w2.next(t, "connected s2", connected(ServerPeer(2)))
	tn.servers[2].Close()
	ws[0].next(t, "s2 disconnected", disconnected(ServerPeer(2)))
	ws[1].next(t, "s2 disconnected", disconnected(ServerPeer(2)))
	w2.next(t, "s2 disconnected", disconnected(ServerPeer(2)))
}

func testUnknownPeer(t *testing.T, f factory) {
	tn := f.make(t, 2, Limits{})
	key := newKey(t)
	c := tn.newClient(key)
	s0 := tn.servers[0]
	cases := []struct {
		name string
		from Transport
		to   Peer
		want error
	}{
		{"server to unknown server", s0, ServerPeer(99), ErrUnknownPeer},
		{"server to itself", s0, ServerPeer(0), ErrUnknownPeer},
		{"server to unconnected client", s0, clientOf(newKey(t)), ErrNotConnected},
		{"client to unknown server", c, ServerPeer(99), ErrUnknownPeer},
		{"client to client", c, clientOf(newKey(t)), ErrUnknownPeer},
	}
	for _, tc := range cases {
		if err := tc.from.Send(tc.to, heartbeat(1)); !errors.Is(err, tc.want) {
			t.Errorf("%s: Send = %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := s0.Send(ServerPeer(1), &wire.Message{}); err == nil {
		t.Error("Send of a message without a body succeeded")
	}
}

// readUntil reads tr's Inbound directly (no watcher) until match.
func readUntil(t *testing.T, tr Transport, what string, match func(Inbound) bool) {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case in := <-tr.Inbound():
			if match(in) {
				return
			}
		case <-timeout:
			t.Fatalf("no %s", what)
		}
	}
}

// fill sends m to `to` until Send says ErrQueueFull. It paces itself so
// that the sender's writer keeps up until the receiver's back-pressure (not
// the speed of the loop) is what fills the queue.
func fill(t *testing.T, tr Transport, to Peer, m *wire.Message) {
	t.Helper()
	for i := 0; i < 100_000; i++ {
		err := tr.Send(to, m)
		if errors.Is(err, ErrQueueFull) {
			return
		}
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("the queue never filled")
}

// A client that does not read is disconnected when its queue overflows; the
// server is not held up.
func testQueueFullClient(t *testing.T, f factory) {
	tn := f.make(t, 2, Limits{QueueLen: 4, InboundLen: 4})
	w0 := watch("s0", tn.servers[0])
	key := newKey(t)
	cp := clientOf(key)
	c := tn.newClient(key)
	readUntil(t, c, "connected s0", connected(ServerPeer(0)))
	w0.next(t, "client connected", connected(cp))
	fill(t, tn.servers[0], cp, bigSubmit(t, 1, 16<<10))
	w0.next(t, "slow client disconnected", disconnected(cp))
}

// A server that does not read makes Send to it fail with ErrQueueFull, and
// the link recovers when it reads again.
func testQueueFullServer(t *testing.T, f factory) {
	tn := f.make(t, 2, Limits{QueueLen: 4, InboundLen: 4})
	s1 := ServerPeer(1)
	readUntil(t, tn.servers[0], "connected s1", connected(s1))
	fill(t, tn.servers[0], s1, bigSubmit(t, 1, 16<<10))
	w1 := watch("s1", tn.servers[1])
	sendRetry(t, tn.servers[0], s1, heartbeat(4242))
	w1.next(t, "the marker", isMsg(ServerPeer(0), seq(4242)))
	for {
		select {
		case in := <-tn.servers[0].Inbound():
			if in.Kind == EventDisconnected {
				t.Fatalf("s0: %s while s1 was slow", in)
			}
			continue
		default:
		}
		break
	}
}

// Close returns even while nobody reads Inbound and peers keep sending; then
// Inbound is closed and Send fails.
func testClose(t *testing.T, f factory) {
	tn := f.make(t, 2, Limits{InboundLen: 4})
	key := newKey(t)
	c := tn.newClient(key)
	wc := watch("client", c)
	wc.next(t, "connected s0", connected(ServerPeer(0)))
	for i := range uint64(200) {
		_ = c.Send(ServerPeer(0), heartbeat(i))
	}
	done := make(chan struct{})
	go func() {
		tn.servers[0].Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatal("Close blocked")
	}
	timeout := time.After(waitTimeout)
	for open := true; open; {
		select {
		case _, open = <-tn.servers[0].Inbound():
		case <-timeout:
			t.Fatal("Inbound not closed after Close")
		}
	}
	if err := tn.servers[0].Send(ServerPeer(1), heartbeat(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
	if err := tn.servers[0].Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	wc.next(t, "s0 disconnected", disconnected(ServerPeer(0)))
}

// A client's bad bytes: EventBadInput, its connection (only) is dropped, it
// reconnects, and traffic goes on.
func testBadInputClient(t *testing.T, f factory) {
	tn := f.make(t, 2, Limits{})
	w0, w1 := watch("s0", tn.servers[0]), watch("s1", tn.servers[1])
	key := newKey(t)
	cp := clientOf(key)
	c := tn.newClient(key)
	wc := watch("client", c)
	for i, w := range []*watcher{w0, w1} {
		wc.next(t, "connected", connected(ServerPeer(wire.ServerID(i))))
		w.next(t, "client connected", connected(cp))
	}
	tn.corrupt(cp, c, ServerPeer(0))
	sendRetry(t, c, ServerPeer(0), heartbeat(1))
	in := w0.next(t, "bad input", isEvent(EventBadInput, cp))
	var bad *BadInputError
	if !errors.As(in.Err, &bad) || bad.From != cp || len(bad.Evidence) == 0 {
		t.Fatalf("bad input error = %#v, want a *BadInputError from %s with evidence", in.Err, cp)
	}
	w0.next(t, "client disconnected", disconnected(cp))
	wc.next(t, "s0 disconnected", disconnected(ServerPeer(0)))
	wc.next(t, "s0 reconnected", connected(ServerPeer(0)))
	w0.next(t, "client reconnected", connected(cp))
	sendRetry(t, c, ServerPeer(0), heartbeat(2))
	w0.next(t, "message after reconnect", isMsg(cp, seq(2)))
	sendRetry(t, c, ServerPeer(1), heartbeat(3))
	w1.next(t, "message to the other server", isMsg(cp, seq(3)))
	for _, in := range w1.all() {
		if in.Kind == EventDisconnected {
			t.Fatalf("s1 saw %s", in)
		}
	}
}

// A server's bad bytes: EventBadInput at the receiver, the sender's link
// drops and comes back, and traffic goes on.
func testBadInputServer(t *testing.T, f factory) {
	tn := f.make(t, 2, Limits{})
	s0, s1 := ServerPeer(0), ServerPeer(1)
	w0, w1 := watch("s0", tn.servers[0]), watch("s1", tn.servers[1])
	w0.next(t, "connected s1", connected(s1))
	w1.next(t, "connected s0", connected(s0))
	tn.corrupt(s1, tn.servers[1], s0)
	sendRetry(t, tn.servers[1], s0, heartbeat(10))
	w0.next(t, "bad input", isEvent(EventBadInput, s1))
	w1.next(t, "link dropped", disconnected(s0))
	w1.next(t, "link back", connected(s0))
	sendRetry(t, tn.servers[1], s0, heartbeat(11))
	w0.next(t, "message after reconnect", isMsg(s1, seq(11)))
	sendRetry(t, tn.servers[0], s1, heartbeat(12))
	w1.next(t, "message the other way", isMsg(s0, seq(12)))
}

// A server that restarts (on the same address) is reconnected to by servers
// and clients, and delivers both ways again.
func testRestart(t *testing.T, f factory) {
	tn := f.make(t, 2, Limits{})
	s0, s1 := ServerPeer(0), ServerPeer(1)
	w0 := watch("s0", tn.servers[0])
	key := newKey(t)
	cp := clientOf(key)
	c := tn.newClient(key)
	wc := watch("client", c)
	w0.next(t, "connected s1", connected(s1))
	wc.next(t, "connected s1", connected(s1))
	tn.servers[1].Close()
	w0.next(t, "s1 down", disconnected(s1))
	wc.next(t, "s1 down", disconnected(s1))
	w1 := watch("s1'", tn.restart(1))
	w0.next(t, "s1 back", connected(s1))
	wc.next(t, "s1 back", connected(s1))
	w1.next(t, "s0 connected", connected(s0))
	w1.next(t, "client connected", connected(cp))
	sendRetry(t, tn.servers[0], s1, heartbeat(1))
	w1.next(t, "from s0", isMsg(s0, seq(1)))
	sendRetry(t, c, s1, heartbeat(2))
	w1.next(t, "from the client", isMsg(cp, seq(2)))
	sendRetry(t, tn.servers[1], s0, heartbeat(3))
	w0.next(t, "from s1", isMsg(s1, seq(3)))
	sendRetry(t, tn.servers[1], cp, heartbeat(4))
	wc.next(t, "from s1", isMsg(s1, seq(4)))
}
