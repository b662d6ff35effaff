package sim

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// Closed clusters (docs/protocol.md change 23) in the simulator. With
// Scenario.Closed the servers have a client CA; every client — correct or
// malicious, not a sybil — is admitted with a certificate for every lock
// name, handed to each server when its connection comes up, as the real
// transport does. A FaultRevoke has the operator sign a revocation of a
// client (the holder at that moment, if Client < 0) and hand it to every
// server that is up, as `bqserver client revoke` does; the rest learn it at
// resync. The revoked client must lose its holding as a lease loss before
// any certificate forms (the reset checker), and never enter again.

// operator is the identity the operator's command connects with.
var operator = wire.ClientID{0x0b, 0xe7}

// clientCA makes the run's client CA from a stream of its own.
func clientCA(seed uint64) (*crypto.PrivateKey, error) {
	r := rand.New(rand.NewPCG(seed, 0xca))
	b := make([]byte, 32)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return crypto.PrivateKeyFromSeed(crypto.Ed25519, b)
}

// grantFor is what the certificate of the client at node allows, or nil
// (an open cluster, a server).
func (w *World) grantFor(node int) *wire.AdmissionBody {
	if w.ca == nil || w.isServer(node) {
		return nil
	}
	p := w.peerOf(node)
	// A window that covers every run (a real certificate always has one).
	return &wire.AdmissionBody{Name: w.nodeName(node), Client: p.Client, NotAfter: math.MaxInt64}
}

// admitAll hands every server the certificate of every client at the start
// of a closed run: the connections that were up from the beginning.
func (w *World) admitAll() {
	if w.ca == nil {
		return
	}
	for s := range w.sc.N {
		for node := w.slots; node < w.slots+len(w.cli)+len(w.mal); node++ {
			w.serverStep(s, core.Input{Kind: core.InputConnected, From: w.peerOf(node), Admission: w.grantFor(node)})
		}
	}
}

// revoke signs a revocation of the fault's client and hands it to every
// server that is up.
func (w *World) revoke(f Fault) {
	if w.ca == nil {
		return
	}
	c := f.Client
	if c < 0 {
		c = w.holder()
	}
	if c >= len(w.cli) {
		return
	}
	id := w.cli[c].c.ID()
	signed, err := wire.SignRevocation(w.ca, w.keys.Cluster, &wire.RevocationBody{Client: id, Name: fmt.Sprintf("c%d", c), At: w.Now().UnixMilli()})
	if err != nil {
		panic(fmt.Sprintf("sim: signing a revocation: %v", err))
	}
	w.stats.Revocations++
	if w.revokedAt == nil {
		w.revokedAt = make(map[int]Instant)
	}
	if _, ok := w.revokedAt[c]; !ok {
		w.revokedAt[c] = w.instant()
	}
	w.trace("the operator revokes c%d (%s)", c, id)
	for s := range w.srv {
		w.serverStep(s, core.Input{From: wire.ClientPeer(operator), Msg: &wire.Message{Revoke: &wire.Revoke{Req: 1, Revocation: signed}}})
	}
}
