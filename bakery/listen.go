package bakery

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

func (c *Client) onUpdate(now time.Time, a *attempt, s wire.ServerID, u *wire.Update, e *Effects) {
	if u.Lock != a.lock {
		return
	}
	for i := range u.Resets {
		cert := &u.Resets[i]
		r := a.reports[cert.Client]
		if r == nil || cert.Session <= r.resetUpTo {
			continue
		}
		if cert.Verify(c.cfg.Keys, c.q) == nil {
			r.resetUpTo = cert.Session
		}
	}
	for i := range u.Statements {
		// The signer's id costs a hash, its signature a verification: skip
		// statements of clients this attempt does not watch or has passed.
		r := a.reports[wire.ClientID(u.Statements[i].Key.Fingerprint())]
		if r == nil || r.passed {
			continue
		}
		c.heardStatement(now, a, r, s, &u.Statements[i])
	}
	for _, x := range u.Absent {
		if r := a.reports[x]; r != nil {
			r.absentFrom[s] = true
		}
	}
	a.heard[s] = true
	if u.Last && !u.Released {
		// The server reached T pushes: subscribe again to keep hearing from
		// it. A released report (change 27) is all it will say: nothing is
		// ahead of us there, and listening again would get the same answer.
		e.Send = append(e.Send, Send{To: s, Msg: a.listen(a.others)})
	}
	c.decide(now, a, e)
}

// listen is a's Listen for members, held (docs/protocol.md change 27): each
// server answers once, when none of them is ahead of us there. Not held
// once the session was suspected (unholdIfSuspected).
func (a *attempt) listen(members []wire.ClientID) *wire.Message {
	return &wire.Message{Listen: &wire.Listen{Req: a.reqListen, Lock: a.lock, Session: a.sess, Attempt: a.att, Members: members, Hold: !a.unheld}}
}

// listensUnheld says whether a's Listen asks for a snapshot and pushes
// instead of a held report (change 27): a TryLock must see who is ahead at
// once; a permits attempt counts members over q servers' reports, and
// reports released by each server at its own count could leave it waiting
// for news that never comes (change 60); a suspected session must see q
// servers report within a TTL (unholdIfSuspected).
func (c *Client) listensUnheld(a *attempt) bool {
	return a.tryOnly || a.holding.Mode == wire.ModePermits || (c.lease != nil && c.lease.Suspicions() > 0)
}

// unholdIfSuspected listens again, without Hold, on every LISTEN of a
// session some server suspected (change 27). Such a session may be refused
// by a correct server for good, and then it needs q of the others, f of
// which may be faulty and silent: the client must see q servers report
// within a TTL to tell waiting for the lock from waiting for ever (stuck),
// and a held report says nothing until the lock comes. The TTL counts
// from this Listen. A faulty server that suspects every session so costs
// its clients the herd-free path, never their progress.
func (c *Client) unholdIfSuspected(now time.Time, e *Effects) {
	if c.lease == nil || c.lease.Suspicions() == 0 {
		return
	}
	for _, lock := range c.sortedLocks() {
		a := c.attempts[lock]
		if a.sess != c.sess || a.phase != phaseListen || a.unheld || len(a.others) == 0 {
			continue
		}
		a.unheld = true
		if len(a.heard) < c.q {
			a.since = now
		}
		c.toAll(e, a.listen(a.others))
	}
}

// unholdIfReleasedBlocked listens again, without Hold, for the members
// still waited for once q servers released their held reports and one of
// them still blocks a (docs/protocol.md change 61). A held report names a
// member that left by its Exit by its absence alone; so a stale value that
// one server reports (a session it voted on, change 42, or a faulty server's
// old statement) is no longer outranked by the Exits of the others, and
// the released reports will say nothing more. The snapshots carry the Exits
// and the pushes follow every change. Once per attempt: unheld never goes
// back.
func (c *Client) unholdIfReleasedBlocked(a *attempt, e *Effects) {
	if a.unheld || len(a.heard) < c.q {
		return
	}
	waiting := a.waitingFor()
	a.unheld = true
	c.Stats.Unheld++
	c.toAll(e, a.listen(waiting))
}

// waitingFor is the members a has not passed yet, in a.others' order.
func (a *attempt) waitingFor() []wire.ClientID {
	var out []wire.ClientID
	for _, x := range a.others {
		if !a.reports[x].passed {
			out = append(out, x)
		}
	}
	return out
}

// passable applies LISTEN's rule to member x (§3.3): x passes for good
// once its value is none, an Exit, void, a ticket after a's, or absent at q
// servers; for a shared attempt also once it is shared (change 60: a
// reader never waits for a reader). A member that does not pass is ahead:
// it blocks a, or counts against a's capacity if its mode is compatible
// (decide).
func (c *Client) passable(a *attempt, x wire.ClientID) bool {
	r := a.reports[x]
	if r.passed {
		return true
	}
	if len(r.absentFrom) >= c.q {
		return true // absence rule
	}
	st := r.best
	if st == nil || st.Phase == wire.PhaseExit || quorum.Void(st, r.resetUpTo) {
		return true
	}
	if a.holding.Mode == wire.ModeShared && a.holding.Compatible(wire.HoldingOf(st)) {
		return true
	}
	if st.Phase == wire.PhaseDoorway {
		return false
	}
	return Token{N: a.n, Client: c.id}.Less(Token{N: st.N, Client: x})
}

// aheadOf says whether statement st, of another member, makes a wait:
// it chooses (a Doorway) or holds a ticket before a's (§3.3), and is no
// reader that a shared attempt passes (change 60).
func (c *Client) aheadOf(a *attempt, st *wire.Statement) bool {
	if a.holding.Mode == wire.ModeShared && a.holding.Compatible(wire.HoldingOf(st)) {
		return false
	}
	switch st.Phase {
	case wire.PhaseDoorway:
		return true
	case wire.PhaseTicket, wire.PhaseHeld:
		return Token{N: st.N, Client: st.Client}.Less(Token{N: a.n, Client: c.id})
	}
	return false
}

// decide enters the critical section once q servers were heard since
// Listen, no member ahead blocks (its mode is incompatible with a's), fewer
// members ahead in a compatible mode are left than a's capacity (change 60:
// for an exclusive attempt, none is compatible and the capacity is 1, so
// every other member must pass, as §3.3 says), and the lease holds now.
func (c *Client) decide(now time.Time, a *attempt, e *Effects) {
	if a.phase != phaseListen {
		return
	}
	if len(a.others) > 0 && len(a.heard) < c.q {
		return
	}
	blocked, counted := false, 0
	for _, x := range a.others {
		r := a.reports[x]
		if !r.passed && len(r.absentFrom) < c.q {
			c.resolve(now, r) // what one server alone claimed, verified now if it can matter
		}
		switch {
		case c.passable(a, x):
			if !r.passed {
				a.progress = now
			}
			r.passed = true
		case a.holding.Compatible(wire.HoldingOf(r.best)):
			counted++
		default:
			blocked = true
		}
	}
	if capacity := a.holding.Capacity(); capacity > 0 && counted >= capacity {
		blocked = true
	}
	if blocked {
		if a.tryOnly {
			a.busy = c.Waiting(a.lock) // who is ahead, for the error
			c.exit(a, Failed, ErrBusy, e)
		}
		c.unholdIfReleasedBlocked(a, e)
		return
	}
	if !c.lease.Holds(now) {
		return // enter only with the lease guarantee (§3.3, §5)
	}
	a.phase = phaseHeld
	a.entered = now
	a.held = c.sign(&wire.Statement{Lock: a.lock, Client: c.id, Session: a.sess, Attempt: a.att, Phase: wire.PhaseHeld, N: a.n, Mode: a.holding.Mode, Permits: a.holding.Permits})
	a.reqHeld = c.req()
	c.byReq[a.reqHeld] = a
	a.heldAcks = quorum.NewAccess[struct{}](c.q)
	e.Events = append(e.Events, Event{Kind: Acquired, Lock: a.lock, Attempt: a.att, Token: Token{N: a.n, Client: c.id}})
	c.toAll(e, &wire.Message{Submit: &wire.Submit{Req: a.reqHeld, Statement: a.held}})
}

// listenRefusedBy counts s's refusal of a's Listen as s's answer: it will
// not report (§3.3). When fewer than q servers are left that could, the
// attempt fails with the refusals instead of waiting forever.
func (c *Client) listenRefusedBy(a *attempt, s wire.ServerID, err error, e *Effects) {
	a.listenRefused[s] = err
	if c.cfg.N-len(a.listenRefused) >= c.q {
		return
	}
	ids := make([]int, 0, len(a.listenRefused))
	for id := range a.listenRefused {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	reasons := make([]string, len(ids))
	for i, id := range ids {
		reasons[i] = a.listenRefused[wire.ServerID(id)].Error()
	}
	c.exit(a, Failed, c.newRefusal(ErrListenRefused, "the Listen", a.lock, a.listenRefused,
		fmt.Sprintf("%v: %d of %d servers refused to listen, so fewer than %d can report: %s",
			ErrListenRefused, len(ids), c.cfg.N, c.q, strings.Join(reasons, "; "))), e)
}

// refusedAccess fails a's GET-TICKET or SET-TICKET once so many servers
// refused it that fewer than q can answer (§6: a refusal is a clear error,
// never an outage the client waits out).
// permission says that the refusal that made it hopeless was the cluster's
// permissions (ErrNotPermitted).
func (c *Client) refusedAccess(a *attempt, what string, rejected string, by map[wire.ServerID]error, hopeless, permission bool, e *Effects) {
	if !hopeless {
		return
	}
	kind := ErrRefused
	if permission {
		kind = ErrNotPermitted
	}
	c.exit(a, Failed, c.newRefusal(kind, what, a.lock, by, fmt.Sprintf("%v: %s of lock %q: fewer than %d of %d servers can accept it: %s",
		kind, what, a.lock, c.q, c.cfg.N, rejected)), e)
}

// relisten renews a LISTEN that has heard from q servers but passed no
// member for a TTL (docs/protocol.md change 20): a faulty server can show a
// newer genuine statement of a member x (its next Doorway) while the
// correct servers, which settled x for this listener by an older value
// (change 15), no longer report x; a new Listen for the members still
// ahead makes them report x's current value again. Reports after it are
// after the first Listen too, so the decision rule is unchanged.
func (c *Client) relisten(now time.Time, a *attempt, e *Effects) {
	if a.phase != phaseListen || len(a.heard) < c.q || now.Sub(a.progress) < c.cfg.TTL {
		return
	}
	waiting := a.waitingFor()
	if len(waiting) == 0 {
		return
	}
	a.progress = now
	c.toAll(e, a.listen(waiting))
}
