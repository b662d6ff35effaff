package sim

import (
	"slices"

	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// dripFeed is a faulty server in league with a silent malicious client
// (docs/protocol.md change 33). It holds the colluder's key, as if the
// client had signed, before it went silent, Doorways for sessions 1, 2, 3,
// … of every lock, and handed them over. It forwards the next session's
// Doorway on every lock it has seen to every other server each time it
// learns the previous session's reset certificate (or after three TTLs
// without one). Fed one after another, each Doorway would stall every
// waiter on the lock for a lease, for as long as the supply lasts; a
// correct server takes, by forward, no session of a client it put on
// probation that it does not know itself, so the drip ends at the first
// reset.
type dripFeed struct{}

func (dripFeed) Name() string                                    { return "drip-feed" }
func (dripFeed) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing { return one(o.To, o.Msg) }

func (dripFeed) Tick(b *Byz) []core.Outgoing {
	if b.Collude == nil || len(b.seen) == 0 {
		return nil
	}
	colluder := wire.ClientID(b.Collude.Public.ID)
	if b.dripSession != 0 && b.resetUpTo[colluder] < b.dripSession && b.Now.Before(b.dripNext) {
		return nil // the last one is still stalling someone
	}
	b.dripSession++
	b.dripNext = b.Now.Add(3 * b.TTL)
	var out []core.Outgoing
	for _, lock := range sortedKeys(b.seen) {
		door, err := wire.SignStatement(b.Collude, b.Keys.Cluster, &wire.Statement{
			Lock: lock, Client: colluder, Session: b.dripSession, Attempt: 1, Phase: wire.PhaseDoorway,
		})
		if err != nil {
			return out
		}
		out = append(out, b.toServers(&wire.Message{Forward: &wire.Forward{Statement: door}})...)
	}
	return out
}

// hasBehavior reports whether a faulty server of the run plays name.
func (w *World) hasBehavior(name string) bool {
	for _, z := range w.sc.Byzantine {
		for _, b := range z.Behaviors {
			if b == name {
				return true
			}
		}
	}
	for _, rc := range w.sc.Replace {
		if slices.Contains(rc.NewByzantine, name) || slices.Contains(rc.RemovedByzantine, name) {
			return true
		}
	}
	return false
}
