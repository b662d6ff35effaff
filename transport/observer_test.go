package transport

import (
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// Observer connections (docs/protocol.md change 32).

// observe does an observer Hello and expects a Welcome as the connection's
// ObserverID; it returns that id.
func (r *rawClient) observe(t *testing.T, key *crypto.PrivateKey) wire.ClientID {
	t.Helper()
	h, err := signHello(key, wire.ClusterID{}, r.nonce, r.exporter(t), true)
	if err != nil {
		t.Fatal(err)
	}
	r.send(t, &wire.Message{Hello: h})
	want := wire.ObserverID(wire.ClientID(key.Public.ID), r.nonce)
	if m := r.read(t); m.Welcome == nil || m.Welcome.Client != want {
		t.Fatalf("expected a welcome as observer %s, got %s", want, m)
	}
	return want
}

// An observer connection is bound to an id of its own, is reported with the
// client it observes as, and does not displace that client's connection:
// messages to the client still reach the client's connection.
func TestQUICObserverBesideItsClient(t *testing.T) {
	qc := newQUICCluster(t, 1, Limits{})
	s0 := qc.listen(t, qc.cfg(0))
	w0 := watch("s0", s0)
	key := newKey(t)
	cp := clientOf(key)
	r1 := dialRaw(t, qc.addrs[0])
	r1.welcome(t, key)
	w0.next(t, "the client's connection", connected(cp))
	r2 := dialRaw(t, qc.addrs[0])
	oid := r2.observe(t, key)
	in := w0.next(t, "the observer's connection", connected(ClientPeer(oid)))
	if in.Observes == nil || *in.Observes != cp.Client {
		t.Fatalf("observer's EventConnected observes %v, want %s", in.Observes, cp.Client)
	}
	if err := s0.Send(cp, heartbeat(7)); err != nil {
		t.Fatal(err)
	}
	if m := r1.read(t); seqOf(m) != 7 {
		t.Fatalf("the client's connection got %s", m)
	}
	if err := s0.Send(ClientPeer(oid), heartbeat(8)); err != nil {
		t.Fatal(err)
	}
	if m := r2.read(t); seqOf(m) != 8 {
		t.Fatalf("the observer's connection got %s", m)
	}
	for _, in := range w0.all() {
		if in.Kind == EventDisconnected {
			t.Fatalf("s0: %s", in)
		}
	}
}

// The Observe flag is signed: a Hello whose flag was flipped after signing
// (a client connection passed off as an observer, or the other way) is refused.
func TestQUICObserverFlagIsSigned(t *testing.T) {
	qc := newQUICCluster(t, 1, Limits{})
	qc.listen(t, qc.cfg(0))
	for _, signed := range []bool{false, true} {
		key := newKey(t)
		r := dialRaw(t, qc.addrs[0])
		h, err := signHello(key, wire.ClusterID{}, r.nonce, r.exporter(t), signed)
		if err != nil {
			t.Fatal(err)
		}
		h.Observe = !signed
		r.send(t, &wire.Message{Hello: h})
		if m := r.read(t); m.Error == nil || m.Error.Code != wire.ErrCodeNotAllowed {
			t.Fatalf("signed observe=%t sent %t: got %s, want Error(not-allowed)", signed, !signed, m)
		}
		r.closedWith(t, codeRefused)
	}
}

// A client has at most MaxObserversPerClient observer connections: a newer
// one closes the oldest observer, never the client's own connection; and
// DisconnectClient of the client closes its observers too (revocation).
func TestQUICObserversBoundedAndRevokedWithTheirClient(t *testing.T) {
	qc := newQUICCluster(t, 1, Limits{MaxObserversPerClient: 2})
	s0 := qc.listen(t, qc.cfg(0))
	w0 := watch("s0", s0)
	key := newKey(t)
	cp := clientOf(key)
	own := dialRaw(t, qc.addrs[0])
	own.welcome(t, key)
	w0.next(t, "the client's connection", connected(cp))
	var obs []*rawClient
	for i := range 3 {
		r := dialRaw(t, qc.addrs[0])
		oid := r.observe(t, key)
		w0.next(t, "an observer", connected(ClientPeer(oid)))
		obs = append(obs, r)
		_ = i
	}
	obs[0].closedWith(t, codeReplaced)
	if err := s0.Send(cp, heartbeat(9)); err != nil {
		t.Fatal(err)
	}
	if m := own.read(t); seqOf(m) != 9 {
		t.Fatalf("the client's connection got %s", m)
	}
	s0.(interface {
		DisconnectClient(wire.ClientID, string)
	}).DisconnectClient(cp.Client, "revoked")
	own.closedWith(t, codeRefused)
	obs[1].closedWith(t, codeRefused)
	obs[2].closedWith(t, codeRefused)
}
