package core

import (
	"sort"
	"time"

	"github.com/bq-lock/bq/wire"
)

// Repair is the rule for messages to a server that never left: the runtime
// could not hand them to the transport because that peer's send queue was
// full (a slow or stalled peer; the connection itself stays up, so no
// reconnect will resynchronise it). Votes, certificates, evidence and
// statement announcements go once (docs/protocol.md §3.5), so one lost for good
// could leave a correct server behind forever. The runtime reports each
// overflow; once the queue has had time to drain, the server resynchronises
// with that peer exactly as on a reconnect (Step with InputConnected from
// it), at most once per RepairEvery while overflows go on. The simulator
// runs the same rule.
// INVARIANT: a peer is in due iff an overflow toward it has not been
// repaired since.
type Repair struct {
	due  map[wire.ServerID]time.Time // peer → earliest resync
	last map[wire.ServerID]time.Time // peer → last resync
}

// Repair timing: wait RepairDrain after an overflow before resynchronising,
// and RepairEvery between two resyncs of one peer.
const (
	RepairDrain = 50 * time.Millisecond
	RepairEvery = time.Second
)

// Overflowed notes that a message to s was dropped at now.
func (r *Repair) Overflowed(s wire.ServerID, now time.Time) {
	if r.due == nil {
		r.due, r.last = make(map[wire.ServerID]time.Time), make(map[wire.ServerID]time.Time)
	}
	if _, ok := r.due[s]; ok {
		return
	}
	at := now.Add(RepairDrain)
	if last, ok := r.last[s]; ok && last.Add(RepairEvery).After(at) {
		at = last.Add(RepairEvery)
	}
	r.due[s] = at
}

// Due returns, in id order, the peers to resynchronise at now, and counts
// them as repaired.
func (r *Repair) Due(now time.Time) []wire.ServerID {
	var out []wire.ServerID
	for s, at := range r.due {
		if !now.Before(at) {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	for _, s := range out {
		delete(r.due, s)
		r.last[s] = now
	}
	return out
}

// Pending reports whether some peer waits for a repair.
func (r *Repair) Pending() bool { return len(r.due) > 0 }
