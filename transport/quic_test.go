package transport

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/quic-go/quic-go"
	"github.com/stretchr/testify/require"
)

// rawClient speaks the client side of the protocol by hand, so a test can
// get it wrong on purpose.
type rawClient struct {
	conn      *quic.Conn
	s         *quic.Stream
	nonce     []byte
	challenge *wire.Challenge
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{wire.Current.ALPN()}, InsecureSkipVerify: true}
	conn, err := quic.DialAddr(ctx, addr, tlsConf, &quic.Config{MaxIncomingStreams: 1, MaxIncomingUniStreams: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	s, err := conn.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := readMsg(s)
	if err != nil || m.Challenge == nil {
		t.Fatalf("expected a challenge: %v %v", m, err)
	}
	return &rawClient{conn: conn, s: s, nonce: m.Challenge.Nonce, challenge: m.Challenge}
}

func (r *rawClient) exporter(t *testing.T) []byte {
	t.Helper()
	e, err := exportHello(r.conn)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (r *rawClient) send(t *testing.T, m *wire.Message) {
	t.Helper()
	if err := writeMsg(r.s, m); err != nil {
		t.Fatal(err)
	}
}

func (r *rawClient) hello(t *testing.T, key *crypto.PrivateKey, nonce, exporter []byte) {
	t.Helper()
	h, err := signHello(key, wire.ClusterID{}, nonce, exporter, false)
	if err != nil {
		t.Fatal(err)
	}
	r.send(t, &wire.Message{Hello: h})
}

func (r *rawClient) read(t *testing.T) *wire.Message {
	t.Helper()
	_ = r.s.SetReadDeadline(time.Now().Add(waitTimeout))
	b, err := readFrame(r.s, crypto.MaxMessageSize)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	m, err := wire.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// welcome does a correct Hello and expects a Welcome.
func (r *rawClient) welcome(t *testing.T, key *crypto.PrivateKey) {
	t.Helper()
	r.hello(t, key, r.nonce, r.exporter(t))
	if m := r.read(t); m.Welcome == nil || m.Welcome.Client != wire.ClientID(key.Public.ID) {
		t.Fatalf("expected a welcome, got %s", m)
	}
}

// closedWith waits for the server to close the connection and checks its code.
func (r *rawClient) closedWith(t *testing.T, code quic.ApplicationErrorCode) {
	t.Helper()
	select {
	case <-r.conn.Context().Done():
	case <-time.After(waitTimeout):
		t.Fatal("the server did not close the connection")
	}
	cause := context.Cause(r.conn.Context())
	ae, ok := errors.AsType[*quic.ApplicationError](cause)
	if !ok || !ae.Remote || ae.ErrorCode != code {
		t.Fatalf("connection closed with %v, want remote application error %d", cause, code)
	}
}

func noEventFrom(t *testing.T, w *watcher, p Peer) {
	t.Helper()
	for _, in := range w.all() {
		if in.From == p {
			t.Fatalf("%s: unexpected %s", w.name, in)
		}
	}
}

// A server whose certificate comes from another CA is refused both ways,
// with a log line naming the peer and the reason, and nothing it sends is
// delivered. The impostor trusts the real CA, so its own outbound connection
// gets as far as the TLS 1.3 client finishing — the acceptor's refusal of its
// certificate only shows on the first stream operation.
func TestQUICForeignCA(t *testing.T) {
	qc := newQUICCluster(t, 2, Limits{})
	w0 := watch("s0", qc.listen(t, qc.cfg(0)))
	foreign := newPKI(t, 2)
	cfg := qc.cfg(1)
	cfg.Cert = foreign.certs[1]
	cfg.IdentifyServer = func(c *x509.Certificate) (wire.ServerID, bool) {
		if bytes.Equal(c.Raw, foreign.certs[1].Certificate[0]) {
			return 1, true
		}
		return qc.pki.identify(c)
	}
	imp := qc.listen(t, cfg)
	wi := watch("impostor", imp)
	if err := imp.Send(ServerPeer(0), heartbeat(1)); err != nil {
		t.Fatal(err)
	}
	qc.sink.wait(t, "node=s0", "refused a server connection", "not issued by the cluster CA")
	qc.sink.wait(t, "node=s1", "cannot connect to server", "peer=s0", "refused our TLS handshake")
	qc.sink.wait(t, "node=s0", "cannot connect to server", "peer=s1", "not issued by the cluster CA")
	noEventFrom(t, w0, ServerPeer(1))
	noEventFrom(t, wi, ServerPeer(0))
}

// A server at s1's address that presents s2's certificate is not s1.
func TestQUICServerCertMismatch(t *testing.T) {
	qc := newQUICCluster(t, 3, Limits{})
	w0 := watch("s0", qc.listen(t, qc.cfg(0)))
	cfg := qc.cfg(2) // s2's certificate and key ...
	cfg.ListenAddr = qc.addrs[1]
	cfg.Peers = map[wire.ServerID]string{0: qc.addrs[0], 2: qc.addrs[1]}
	qc.listen(t, cfg) // ... listening where s1 should be
	qc.sink.wait(t, "node=s0", "cannot connect to server", "peer=s1", "dialed s1", "presented the certificate of s2")
	noEventFrom(t, w0, ServerPeer(1))
}

// The Hello binds the connection: a signature over another nonce or another
// connection's exporter is refused with Error{NotAllowed}; a correct one is
// welcomed and only then does the server hear of the client.
func TestQUICHelloBinding(t *testing.T) {
	qc := newQUICCluster(t, 1, Limits{})
	w0 := watch("s0", qc.listen(t, qc.cfg(0)))
	key := newKey(t)
	random := func() []byte {
		b := make([]byte, 32)
		rand.Read(b)
		return b
	}
	for _, tc := range []struct {
		name            string
		nonce, exporter func(r *rawClient) []byte
	}{
		{"wrong exporter", func(r *rawClient) []byte { return r.nonce }, func(*rawClient) []byte { return random() }},
		{"wrong nonce", func(*rawClient) []byte { return random() }, func(r *rawClient) []byte { return r.exporter(t) }},
		{"another connection's exporter", func(r *rawClient) []byte { return r.nonce }, func(*rawClient) []byte {
			return dialRaw(t, qc.addrs[0]).exporter(t)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, qc.addrs[0])
			r.hello(t, key, tc.nonce(r), tc.exporter(r))
			m := r.read(t)
			if m.Error == nil || m.Error.Code != wire.ErrCodeNotAllowed {
				t.Fatalf("got %s, want Error(not-allowed)", m)
			}
			r.closedWith(t, codeRefused)
		})
	}
	qc.sink.wait(t, "refused a client connection", "does not verify")
	noEventFrom(t, w0, clientOf(key))

	// A Hello whose key is not the signer's.
	r := dialRaw(t, qc.addrs[0])
	h, err := signHello(newKey(t), wire.ClusterID{}, r.nonce, r.exporter(t), false)
	if err != nil {
		t.Fatal(err)
	}
	h.Key = key.Public.Wire
	r.send(t, &wire.Message{Hello: h})
	if m := r.read(t); m.Error == nil || m.Error.Code != wire.ErrCodeNotAllowed {
		t.Fatalf("got %s, want Error(not-allowed)", m)
	}
	r.closedWith(t, codeRefused)

	// Something else than a Hello.
	r = dialRaw(t, qc.addrs[0])
	r.send(t, heartbeat(1))
	if m := r.read(t); m.Error == nil || m.Error.Code != wire.ErrCodeMalformed {
		t.Fatalf("got %s, want Error(malformed)", m)
	}
	r.closedWith(t, codeHandshake)
	noEventFrom(t, w0, clientOf(key))

	// The right Hello.
	r = dialRaw(t, qc.addrs[0])
	r.welcome(t, key)
	w0.next(t, "client connected", connected(clientOf(key)))
}

// A closed cluster refuses keys it does not admit.
func TestQUICAdmitClient(t *testing.T) {
	qc := newQUICCluster(t, 1, Limits{})
	cfg := qc.cfg(0)
	cfg.AdmitClient = func(c wire.ClientID, _ *crypto.Signed) (*wire.AdmissionBody, error) {
		return nil, fmt.Errorf("%s has no admission certificate", c)
	}
	w0 := watch("s0", qc.listen(t, cfg))
	key := newKey(t)
	qc.dial(t, key)
	qc.sink.wait(t, "node="+clientOf(key).String(), "cannot connect to server", "not-allowed", "no admission certificate")
	noEventFrom(t, w0, clientOf(key))
}

// An oversize frame closes that connection (EventBadInput) without the
// server reading or allocating it; the server keeps serving other clients.
func TestQUICOversizeFrame(t *testing.T) {
	qc := newQUICCluster(t, 1, Limits{})
	s0 := qc.listen(t, qc.cfg(0))
	w0 := watch("s0", s0)
	good := newKey(t)
	c := qc.dial(t, good)
	wc := watch("good client", c)
	wc.next(t, "connected", connected(ServerPeer(0)))
	w0.next(t, "good client connected", connected(clientOf(good)))
	roundTrip := func(n uint64) {
		sendRetry(t, c, ServerPeer(0), heartbeat(n))
		w0.next(t, "request", isMsg(clientOf(good), seq(n)))
		sendRetry(t, s0, clientOf(good), heartbeat(n))
		wc.next(t, "reply", isMsg(ServerPeer(0), seq(n)))
	}
	roundTrip(1)

	// After the handshake: a frame announcing MaxFrame+1 bytes.
	bad := newKey(t)
	r := dialRaw(t, qc.addrs[0])
	r.welcome(t, bad)
	w0.next(t, "raw client connected", connected(clientOf(bad)))
	if _, err := r.s.Write(binary.BigEndian.AppendUint32(nil, crypto.MaxMessageSize+1)); err != nil {
		t.Fatal(err)
	}
	in := w0.next(t, "bad input", isEvent(EventBadInput, clientOf(bad)))
	if !errors.Is(in.Err, errFrameTooLarge) {
		t.Fatalf("bad input error %v, want errFrameTooLarge", in.Err)
	}
	w0.next(t, "raw client disconnected", disconnected(clientOf(bad)))
	r.closedWith(t, codeBadInput)
	qc.sink.wait(t, "node=s0", "bad input", "frame exceeds the size limit")
	roundTrip(2)

	// Before the handshake: a Hello frame far over the set-up limit.
	r = dialRaw(t, qc.addrs[0])
	if _, err := r.s.Write(binary.BigEndian.AppendUint32(nil, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if m := r.read(t); m.Error == nil || m.Error.Code != wire.ErrCodeMalformed {
		t.Fatalf("got %s, want Error(malformed)", m)
	}
	r.closedWith(t, codeHandshake)
	roundTrip(3)
}

// A client that connects and says nothing is dropped after HandshakeTimeout.
func TestQUICHandshakeTimeout(t *testing.T) {
	qc := newQUICCluster(t, 1, Limits{HandshakeTimeout: time.Second})
	qc.listen(t, qc.cfg(0))
	r := dialRaw(t, qc.addrs[0])
	start := time.Now()
	r.closedWith(t, codeHandshake) // by the handshake timeout, not the idle one
	// Generous (5 × HandshakeTimeout), for -race on 2 cores.
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("dropped after %s", d)
	}
}

// A server holds at most MaxClientConns client connections.
func TestQUICMaxClientConns(t *testing.T) {
	qc := newQUICCluster(t, 1, Limits{MaxClientConns: 1})
	w0 := watch("s0", qc.listen(t, qc.cfg(0)))
	k1 := newKey(t)
	r1 := dialRaw(t, qc.addrs[0])
	r1.welcome(t, k1)
	w0.next(t, "first client", connected(clientOf(k1)))
	r2 := dialRaw(t, qc.addrs[0])
	if m := r2.read(t); m.Error == nil || m.Error.Code != wire.ErrCodeLimit {
		t.Fatalf("got %s, want Error(limit)", m)
	}
	r2.closedWith(t, codeLimit)
}

// A newer connection of the same client replaces the older one; Send uses
// the newer, and the server does not report the client as gone.
func TestQUICClientReplaced(t *testing.T) {
	qc := newQUICCluster(t, 1, Limits{})
	s0 := qc.listen(t, qc.cfg(0))
	w0 := watch("s0", s0)
	key := newKey(t)
	cp := clientOf(key)
	r1 := dialRaw(t, qc.addrs[0])
	r1.welcome(t, key)
	w0.next(t, "first connection", connected(cp))
	r2 := dialRaw(t, qc.addrs[0])
	r2.welcome(t, key)
	w0.next(t, "second connection", connected(cp))
	r1.closedWith(t, codeReplaced)
	if err := s0.Send(cp, heartbeat(7)); err != nil {
		t.Fatal(err)
	}
	if m := r2.read(t); seqOf(m) != 7 {
		t.Fatalf("newer connection got %s", m)
	}
	for _, in := range w0.all() {
		if in.Kind == EventDisconnected {
			t.Fatalf("s0: %s", in)
		}
	}
}

// Bad configuration is refused at start-up, one error per field.
func TestQUICConfigErrors(t *testing.T) {
	_, err := ListenServer(ServerConfig{Limits: Limits{QueueLen: -1}})
	for _, want := range []string{"ListenAddr", "CAPool", "IdentifyServer", "Cert", "QueueLen"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ListenServer error %v does not name %s", err, want)
		}
	}
	_, err = DialClient(ClientConfig{Limits: Limits{BackoffMin: time.Second, BackoffMax: time.Millisecond}})
	for _, want := range []string{"Key", "Servers", "CAPool", "IdentifyServer", "BackoffMax"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DialClient error %v does not name %s", err, want)
		}
	}
	pki := newPKI(t, 2)
	_, err = ListenServer(ServerConfig{ID: 0, ListenAddr: "127.0.0.1:0", Cert: pki.certs[1], CAPool: pki.pool, IdentifyServer: pki.identify})
	if err == nil || !strings.Contains(err.Error(), "does not name this certificate") {
		t.Errorf("a server with another server's certificate: %v", err)
	}
}

// A server that crashes and comes back on its address answers the packets of
// its old connections with a stateless reset (its key derives from its TLS
// key, so it is the same after a restart): the client notices at the next
// packet and reconnects, instead of waiting out the idle timeout (set far
// beyond this test's wait here, so only the reset can end the connection).
func TestQUICRestartedServerResetsOldConnections(t *testing.T) {
	qc := newQUICCluster(t, 1, Limits{IdleTimeout: 10 * waitTimeout})
	s0 := qc.listen(t, qc.cfg(0))
	w0 := watch("s0", s0)
	key := newKey(t)
	c := qc.dial(t, key)
	wc := watch("client", c)
	wc.next(t, "connection", connected(ServerPeer(0)))
	w0.next(t, "the client", connected(clientOf(key)))

	// A crash: the socket goes away without a word to the client.
	if err := s0.(*node).udp.Close(); err != nil {
		t.Fatal(err)
	}
	_ = s0.Close()
	s1 := qc.listen(t, qc.cfg(0)) // the same address and certificate
	w1 := watch("s0 again", s1)

	if err := c.Send(ServerPeer(0), heartbeat(1)); err != nil {
		t.Fatal(err)
	}
	wc.next(t, "the old connection reset", disconnected(ServerPeer(0)))
	wc.next(t, "a new connection", connected(ServerPeer(0)))
	w1.next(t, "the client again", connected(clientOf(key)))
}

// docs/protocol.md §1, cluster binding: a client's Hello is signed for one
// cluster, and a server of another refuses it with a reason that names both;
// a client that reaches a server of another cluster says so and does not
// count it.
func TestQUICHelloOfAnotherCluster(t *testing.T) {
	ours, theirs := wire.ClusterID{1}, wire.ClusterID{2}
	qc := newQUICCluster(t, 1, Limits{})
	cfg := qc.cfg(0)
	cfg.Cluster = ours
	w0 := watch("s0", qc.listen(t, cfg))
	key := newKey(t)

	r := dialRaw(t, qc.addrs[0])
	if ch := r.challenge; ch.Cluster != ours {
		t.Fatalf("challenge names cluster %s, want %s", ch.Cluster, ours)
	}
	h, err := signHello(key, theirs, r.nonce, r.exporter(t), false)
	if err != nil {
		t.Fatal(err)
	}
	r.send(t, &wire.Message{Hello: h})
	m := r.read(t)
	if m.Error == nil || m.Error.Code != wire.ErrCodeNotAllowed || !strings.Contains(m.Error.Detail, "for cluster "+theirs.String()) ||
		!strings.Contains(m.Error.Detail, "of cluster "+ours.String()) {
		t.Fatalf("got %s, want Error(not-allowed) naming both clusters", m)
	}
	r.closedWith(t, codeRefused)

	// The same Hello with its Cluster field changed to ours does not verify:
	// the signature covers the cluster.
	r = dialRaw(t, qc.addrs[0])
	h, err = signHello(key, theirs, r.nonce, r.exporter(t), false)
	if err != nil {
		t.Fatal(err)
	}
	h.Cluster = ours
	r.send(t, &wire.Message{Hello: h})
	if m := r.read(t); m.Error == nil || m.Error.Code != wire.ErrCodeNotAllowed || !strings.Contains(m.Error.Detail, "does not verify") {
		t.Fatalf("got %s, want Error(not-allowed): bad signature", m)
	}
	noEventFrom(t, w0, clientOf(key))

	// A client of the other cluster hears which cluster it reached.
	cc := qc.clientConfig(key)
	cc.Cluster = theirs
	tr, err := DialClient(cc)
	if err != nil {
		t.Fatal(err)
	}
	qc.all.add(tr)
	qc.sink.wait(t, "is a server of cluster "+ours.String(), "not of this cluster "+theirs.String())
	noEventFrom(t, w0, clientOf(key))
}

// dialRefusedAfter dials addr burst times, which must be accepted, then
// once more, which must be refused within the handshake.
func dialRefusedAfter(t *testing.T, addr string, burst int) {
	t.Helper()
	for range burst {
		dialRaw(t, addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{wire.Current.ALPN()}, InsecureSkipVerify: true}
	conn, err := quic.DialAddr(ctx, addr, tlsConf, &quic.Config{HandshakeIdleTimeout: time.Second})
	if err == nil {
		_ = conn.CloseWithError(0, "")
		t.Fatalf("connection %d within the burst's second was accepted", burst+1)
	}
}

// A server starts at most AcceptRate handshakes a second (a token bucket of
// AcceptBurst, golang.org/x/time/rate): beyond it, new connections are
// refused before any TLS work, and it says so.
func TestQUICAcceptRate(t *testing.T) {
	qc := newQUICCluster(t, 1, Limits{AcceptRate: 0.001, AcceptBurst: 2})
	qc.listen(t, qc.cfg(0))
	dialRefusedAfter(t, qc.addrs[0], 2)
	qc.sink.wait(t, "refusing new connections", "accept rate exceeded")
}

// One source address starts at most AcceptRatePerAddress handshakes a
// second (docs/protocol.md change 25), below the server's AcceptRate: a
// flood from one address is refused before any TLS work, it says so, and
// the server is told, for its metrics.
func TestQUICAcceptRatePerAddress(t *testing.T) {
	qc := newQUICCluster(t, 1, Limits{AcceptRate: 1000, AcceptBurst: 1000, AcceptRatePerAddress: 0.001, AcceptBurstPerAddress: 2})
	cfg := qc.cfg(0)
	limited := make(chan string, 16)
	cfg.OnLimit = func(l string) { limited <- l }
	qc.listen(t, cfg)
	dialRefusedAfter(t, qc.addrs[0], 2)
	qc.sink.wait(t, "refusing new connections", "accept rate of this address exceeded")
	select {
	case l := <-limited:
		require.Equal(t, "accept_rate_per_address", l, "counted for the server's metrics")
	case <-time.After(5 * time.Second):
		t.Fatal("the refusal was not reported to OnLimit")
	}
}

// The buckets of source addresses are bounded: past maxAddressBuckets,
// full ones are dropped, and if none is, all are.
func TestAddressBucketsBounded(t *testing.T) {
	lim, err := Limits{AcceptRatePerAddress: 1, AcceptBurstPerAddress: 1}.withDefaults()
	require.NoError(t, err)
	n := newNode(lim, nil, nil)
	now := time.Unix(1000, 0)
	for i := range maxAddressBuckets + 10 {
		addr := &net.UDPAddr{IP: net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)), Port: 1}
		require.True(t, n.allowAddress(addr, now), "a new address's first handshake")
		require.LessOrEqual(t, len(n.perAddress), maxAddressBuckets)
	}
	last := maxAddressBuckets + 9
	require.False(t, n.allowAddress(&net.UDPAddr{IP: net.IPv4(10, byte(last>>16), byte(last>>8), byte(last)), Port: 2}, now),
		"a tracked address still has its bucket")
}

// ServerConfig.Preverify's check sees every message of a connection in its
// read loop, before the message is delivered (the signature checks that run in
// parallel ahead of a server's core: wire.Preverifier).
func TestQUICPreverifyRunsBeforeDelivery(t *testing.T) {
	qc := newQUICCluster(t, 1, Limits{})
	cfg := qc.cfg(0)
	var seen atomic.Int64
	cfg.Preverify = func(Peer) func(*wire.Message) {
		return func(m *wire.Message) {
			if m.Ack != nil && m.Ack.Req == 77 {
				seen.Add(1)
			}
		}
	}
	w0 := watch("s0", qc.listen(t, cfg))
	key := newKey(t)
	c := qc.dial(t, key)
	w0.next(t, "client connected", connected(clientOf(key)))
	require.NoError(t, c.Send(ServerPeer(0), &wire.Message{Ack: &wire.Ack{Req: 77}}))
	w0.next(t, "the client's message", isMsg(clientOf(key), func(m *wire.Message) bool {
		require.Equal(t, int64(1), seen.Load(), "delivered before the read loop's Preverify saw it")
		return m.Ack != nil && m.Ack.Req == 77
	}))
}
