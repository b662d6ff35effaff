package transport

import (
	"strings"
	"testing"

	"github.com/bq-lock/bq/wire"
)

// docs/protocol.md §1, "Versions", with two versions side by side over QUIC:
//   - a client of another major version is refused in the TLS handshake (no
//     application protocol in common), hears why (EventRefused, naming both
//     versions' ALPN), and never reaches the server as a peer: no
//     EventConnected, no bad input, nothing a core could suspect or ban;
//   - a client of a newer minor version connects, and a message of a kind
//     the server does not know is skipped: the connection stays up and what
//     follows is delivered.
func TestVersionsSideBySide(t *testing.T) {
	qc := newQUICCluster(t, 1, Limits{})
	s0 := qc.listen(t, qc.cfg(0))
	w0 := watch("s0", s0)

	newer := newKey(t)
	cfg := qc.clientConfig(newer)
	cfg.Version = wire.Version{Major: wire.ProtocolMajor + 1}
	c, err := DialClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	qc.all.add(c)
	wc := watch("client", c)
	in := wc.next(t, "a refusal", isEvent(EventRefused, ServerPeer(0)))
	if msg := in.Err.Error(); !strings.Contains(msg, "speaks no protocol version this client does (bq/2)") {
		t.Fatalf("refusal says %q", msg)
	}
	qc.sink.wait(t, "refused a connection of another protocol version", "bq/2", "speaks=bq/1")
	for _, in := range w0.all() {
		if in.From == clientOf(newer) {
			t.Fatalf("s0 saw the client of another major version: %s", in)
		}
	}

	minor := newKey(t)
	cfg = qc.clientConfig(minor)
	cfg.Version = wire.Version{Major: wire.ProtocolMajor, Minor: wire.ProtocolMinor + 1}
	c2, err := DialClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	qc.all.add(c2)
	w2 := watch("minor", c2)
	w2.next(t, "connected", connected(ServerPeer(0)))
	w0.next(t, "the minor-version client", connected(clientOf(minor)))

	// A raw client of a newer minor version sends a kind s0 does not know,
	// then a Heartbeat.
	raw := newKey(t)
	r := dialRaw(t, qc.addrs[0])
	r.welcome(t, raw)
	w0.next(t, "the raw client", connected(clientOf(raw)))
	unknownKind := []byte{0xa1, 0x18, 0xc8, 0xa1, 0x01, 0x01} // {200: {1: 1}}
	if _, err := r.s.Write(appendFrame(nil, unknownKind)); err != nil {
		t.Fatal(err)
	}
	r.send(t, heartbeat(9))
	w0.next(t, "the heartbeat after it", isMsg(clientOf(raw), func(m *wire.Message) bool { return m.Heartbeat != nil && m.Heartbeat.Seq == 9 }))
	for _, in := range w0.all() {
		if in.Kind == EventBadInput || (in.Kind == EventDisconnected && in.From == clientOf(raw)) {
			t.Fatalf("s0: %s", in)
		}
	}
}
