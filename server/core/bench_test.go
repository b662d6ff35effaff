package core

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// BenchmarkDoorwayExit is one client's Doorway and Exit at one server, the
// statements signed beforehand: what a server spends per statement besides
// verifying its signature (which it does here too) — the checks of
// admission, rates, the member cap, the state bound and the hold clocks.
func BenchmarkDoorwayExit(b *testing.B) {
	var servers []*crypto.Parsed
	var signers []*crypto.PrivateKey
	for range 4 {
		k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		servers, signers = append(servers, k.Public), append(signers, k)
	}
	keys := wire.NewKeyring(1, servers)
	k, err := New(DefaultConfig(0, 4, 1, keys, signers[0]))
	if err != nil {
		b.Fatal(err)
	}
	ck, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	id := wire.ClientID(ck.Public.ID)
	msgs := make([]*wire.Message, 0, 2*b.N)
	for i := range b.N {
		for _, ph := range []wire.Phase{wire.PhaseDoorway, wire.PhaseExit} {
			ss, err := wire.SignStatement(ck, keys.Cluster, &wire.Statement{Lock: "L", Client: id, Session: 1, Attempt: uint64(i + 1), Phase: ph})
			if err != nil {
				b.Fatal(err)
			}
			msgs = append(msgs, &wire.Message{Submit: &wire.Submit{Req: uint64(i + 1), Statement: ss}})
		}
	}
	now := time.Unix(1000, 0)
	k.Step(now, Input{From: wire.ClientPeer(id), Msg: &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 10000}}})
	b.ResetTimer()
	for i, m := range msgs {
		now = now.Add(10 * time.Millisecond) // 100 statements a second: under client_rate
		e := k.Step(now, Input{From: wire.ClientPeer(id), Msg: m})
		if len(e.Send) == 0 || e.Send[0].Msg.Error != nil {
			b.Fatalf("statement %d: %v", i, e.Send)
		}
	}
}
