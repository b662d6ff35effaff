package bakery

import (
	"fmt"
	"time"

	"github.com/bq-lock/bq/activeset"
	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// Epochs on the client's side (docs/protocol.md change 43). A server that
// sealed the client's epoch shows it the epochs after it; the client
// verifies them from its cluster CA (a faulty server can hide an epoch,
// never forge one) and moves to the newest: its accesses count answers of
// that epoch's members only, from then on. The session goes on: it is
// opened at the new members (a copy brought it there), and the guarantee
// the old epoch's acks gave is kept until the new epoch's acks give a
// longer one. An attempt not yet holding starts over in the new epoch (its
// Ticket would need a J of it), with a new attempt number, so its new
// Doorway supersedes what was copied of it; a holding stays (its Ticket
// and Held were copied, and its Ticket keeps its J of the old epoch there);
// an Exit goes to the new members.

// epochRetry is how long a request refused by a member of the client's
// epoch that is still copying waits before it goes to that member again.
const epochRetry = 100 * time.Millisecond

// Chain is the epochs the client knows (nil without ClusterCA), for its
// runtime to dial their members. The caller must not change it.
func (c *Client) Chain() *wire.Chain { return c.chain }

// Members are the servers of the client's epoch, ascending, with its f and
// q: whose answers count (docs/protocol.md change 43).
func (c *Client) Members() (ids []wire.ServerID, f, q int) {
	for i, k := range c.cfg.Keys.Servers {
		if k != nil {
			ids = append(ids, wire.ServerID(i))
		}
	}
	return ids, c.cfg.F, c.q
}

// Epoch is the newest epoch the client knows (0 without a cluster CA).
func (c *Client) Epoch() uint64 {
	if c.chain == nil {
		return 0
	}
	return c.chain.Number()
}

// onEpochNews adopts the epochs shown, and moves if one is newer.
func (c *Client) onEpochNews(now time.Time, n *wire.EpochNews, e *Effects) {
	if c.chain == nil {
		c.lastRefusal = "the cluster moved to a newer epoch, and this client has no cluster CA to follow it"
		return
	}
	from := c.chain.Number()
	_, _ = c.chain.Extend(n.List()) // what verifies is kept; the rest is a faulty server's
	if c.chain.Conflict() != nil {
		// Two epochs of one number, both verified (change 64): keys beyond
		// what bq tolerates leaked. Every attempt ends, and no new one
		// starts: which epoch's members to believe, nobody can say.
		for _, lock := range c.sortedLocks() {
			a := c.attempts[lock]
			a.outcome, a.err = Failed, c.EpochConflict()
			if a.phase == phaseHeld {
				a.outcome = Lost
			}
			c.finish(a, e)
		}
		return
	}
	if c.chain.Number() > from {
		c.moveTo(now, e)
	}
}

// EpochConflict is the error every attempt gets once the client was shown
// two epochs of one number, both signed and endorsed (docs/protocol.md
// change 64), nil before.
func (c *Client) EpochConflict() error {
	if c.chain == nil || c.chain.Conflict() == nil {
		return nil
	}
	return fmt.Errorf("bakery: %w: this client serves neither; the cluster's operator must act (its servers raise the same alarm)", c.chain.Conflict())
}

// useEpoch makes epoch n's members, quorum and f the client's.
func (c *Client) useEpoch(n uint64) {
	keys, q, _ := c.chain.Keyring(n)
	c.cfg.Keys, c.cfg.N, c.cfg.F, c.q = keys, keys.Len(), c.chain.Faults(n), q
}

// moveTo moves the client to the newest epoch it knows.
func (c *Client) moveTo(now time.Time, e *Effects) {
	c.useEpoch(c.chain.Number())
	c.Stats.EpochMoves++
	c.sessionRefusals, c.maxHolds, c.retries = nil, nil, nil
	if c.lease != nil && !c.reopen {
		old := c.lease
		c.lease = quorum.NewLease(c.q, c.cfg.TTL, c.cfg.Margin+c.cfg.Grace, c.sess)
		c.lease.Carry(old.ValidUntil())
		c.hbSeq = 0
		c.lease.Sent(0, now) // the SessionOpen is heartbeat 0
		c.nextHB = now.Add(c.cfg.TTL / 3)
		c.toAll(e, c.sessionOpen(c.sess))
	}
	for _, lock := range c.sortedLocks() {
		a := c.attempts[lock]
		switch a.phase {
		case phaseGetTicket, phaseSetTicket, phaseListen:
			c.finish(a, e)
			if _, err := c.startAttempt(now, lock, a.holding, a.tryOnly, e); err != nil {
				e.Events = append(e.Events, Event{Kind: Failed, Lock: lock, Attempt: a.att, Err: err})
			}
		case phaseExiting:
			a.exitAcks = quorum.NewAccess[struct{}](c.q)
			c.toAll(e, &wire.Message{Submit: &wire.Submit{Req: a.reqExit, Statement: a.exit}})
		}
	}
	// A pending access starts afresh, under a new request id: answers
	// gathered in the old epoch came from its members and were counted
	// against its q, and a quorum mixing them with the new members'
	// answers may hold more than the new epoch's f faulty servers (the
	// removed one among them) and fewer than its q (found by the campaign,
	// seed 8435661); an answer to the old request still in flight — a
	// push of the old subscription, which the client would take for the
	// new one's snapshot (seed 8441704) — now matches nothing.
	for _, key := range c.sortedOps() {
		o := c.ops[key]
		delete(c.ops, o.req)
		o.req = c.req()
		c.ops[o.req] = o
		switch {
		case o.isRead:
			o.reads = quorum.NewAccess[quorum.RegisterValue](c.q)
			c.toAll(e, c.readMsg(o))
		case o.set == nil && o.resend != nil:
			o.exitAcks = quorum.NewAccess[struct{}](c.q)
			for s := range o.waitFor {
				if c.cfg.Keys.Key(s) == nil {
					delete(o.waitFor, s) // a removed member's answer counts for nothing
				}
			}
			o.resend = renumbered(o.resend, o.req)
			c.toAll(e, o.resend)
		case o.set != nil:
			o.set = activeset.NewSetReader(c.q)
			clear(o.snapshotDue)
			for i, k := range c.cfg.Keys.Servers {
				if k != nil {
					o.snapshotDue[wire.ServerID(i)] = true
				}
			}
			c.toAll(e, c.getSetMsg(o))
		}
	}
}

// renumbered is m, an ExitEarlier's Submit or a SessionClose, as request req.
func renumbered(m *wire.Message, req uint64) *wire.Message {
	out := *m
	switch {
	case m.Submit != nil:
		sub := *m.Submit
		sub.Req, out.Submit = req, &sub
	case m.SessionClose != nil:
		sc := *m.SessionClose
		sc.Req, out.SessionClose = req, &sc
	}
	return &out
}
