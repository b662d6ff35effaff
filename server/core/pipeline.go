package core

import "github.com/bq-lock/bq/wire"

// Pipeline is the rule of the commit pipeline (docs/protocol.md §9 with
// docs/protocol.md changes 12 and 13), shared by the runtime
// (server) and the simulator (test/sim), so the simulator checks
// the rule the servers run:
//
//   - a batch whose records are all lazy (Record.Lazy) costs no commit of its
//     own: its records are held back and go in front of the next batch with
//     an eager record, or of the next tick's batch (in order, so a later
//     record of the same key wins);
//   - a message that only reports (Outgoing.Reports) goes at once unless an
//     earlier message to the same peer still waits; every other message waits
//     for its batch's commit, and so, in order, for every earlier batch's.
//
// The zero Pipeline is ready. It is not safe for concurrent use.
type Pipeline struct {
	// waiting counts, per peer, the messages Batch returned as late and Sent
	// has not been told of yet.
	// INVARIANT: no zero entries.
	waiting map[wire.Peer]int
	// lazy holds lazy records not yet returned to commit, oldest first.
	lazy []Record
}

// Batch takes one step's effects (tick: the step was a Tick). It returns the
// records to commit for this batch, the messages that may be sent now, and
// the messages that must wait until those records (and every earlier
// batch's) are durable; once sent, they go to Sent.
func (p *Pipeline) Batch(e Effects, tick bool) (records []Record, now, late []Outgoing) {
	switch {
	case !tick && !Eager(e.Persist):
		p.lazy = append(p.lazy, e.Persist...)
	case len(p.lazy) > 0:
		records = append(p.lazy, e.Persist...)
		p.lazy = nil
	default:
		records = e.Persist
	}
	if p.waiting == nil {
		p.waiting = make(map[wire.Peer]int)
	}
	for _, o := range e.Send {
		if o.Reports() && p.waiting[o.To] == 0 {
			now = append(now, o)
			continue
		}
		p.waiting[o.To]++
		late = append(late, o)
	}
	return records, now, late
}

// Sent tells the pipeline that late messages returned by Batch were sent.
func (p *Pipeline) Sent(late []Outgoing) {
	for _, o := range late {
		if p.waiting[o.To]--; p.waiting[o.To] <= 0 {
			delete(p.waiting, o.To)
		}
	}
}
