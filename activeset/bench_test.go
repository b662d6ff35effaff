package activeset

import (
	"crypto/rand"
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// BenchmarkHandoffs64 is a lock with 64 clients in its queue, each waiting
// in a held Listen on every client ahead of it (change 27): each handoff is
// the holder's Held and Exit, and its return to the end of the queue with a
// Doorway, a Ticket and a held Listen. Reported per handoff: the listener
// walk that every change of the lock's members costs a server.
func BenchmarkHandoffs64(b *testing.B) {
	const k, rounds = 64, 4
	type client struct {
		s       signer
		entries []*Entry // per round: Doorway, Ticket, Held, Exit
	}
	cs := make([]client, k)
	entry := func(s signer, att uint64, ph wire.Phase, n uint64) *Entry {
		st := &wire.Statement{Lock: "L", Client: s.id, Session: 1, Attempt: att, Phase: ph, N: n}
		if ph == wire.PhaseTicket {
			st.JHash = &wire.Digest{}
		}
		ss, err := wire.SignStatement(s.key, wire.ClusterID{}, st)
		if err != nil {
			b.Fatal(err)
		}
		got, err := ss.Verify(wire.ClusterID{})
		if err != nil {
			b.Fatal(err)
		}
		return &Entry{Signed: ss, St: got}
	}
	for i := range cs {
		key, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		cs[i].s = signer{key: key, id: wire.ClientID(key.Public.ID)}
		for r := range rounds + 1 {
			n := uint64(r*k + i + 1)
			att := uint64(r + 1)
			cs[i].entries = append(cs[i].entries, entry(cs[i].s, att, wire.PhaseDoorway, 0), entry(cs[i].s, att, wire.PhaseTicket, n),
				entry(cs[i].s, att, wire.PhaseHeld, n), entry(cs[i].s, att, wire.PhaseExit, 0))
		}
	}
	listen := func(l *Lock, i int, n uint64, queue []int) {
		watch := make(map[wire.ClientID]bool, len(queue))
		for _, j := range queue {
			watch[cs[j].s.id] = true
		}
		l.Subscribe(&Subscription{Client: cs[i].s.id, Req: n, Watch: watch, Remaining: 256, Settled: settledBehind(n), Hold: true}, nil)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		l := NewLock("L")
		var queue []int
		for i := range cs {
			l.Apply(cs[i].entries[0])
			l.Apply(cs[i].entries[1])
			listen(l, i, uint64(i+1), queue)
			queue = append(queue, i)
		}
		b.StartTimer()
		for r := range rounds {
			for range k {
				i := queue[0]
				queue = queue[1:]
				e := cs[i].entries[4*r:]
				l.Apply(e[2])
				l.Changed(cs[i].s.id, nil)
				l.Apply(e[3])
				l.Changed(cs[i].s.id, nil)
				next := cs[i].entries[4*(r+1):]
				l.Apply(next[0])
				l.Changed(cs[i].s.id, nil)
				l.Apply(next[1])
				l.Changed(cs[i].s.id, nil)
				listen(l, i, next[1].St.N, queue)
				queue = append(queue, i)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rounds*k), "ns/handoff")
}
