package bakery

import (
	"errors"
	"fmt"
	"time"

	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// Lock starts an exclusive attempt on lock (GET-TICKET). With tryOnly the
// attempt gives up (Failed, ErrBusy) instead of waiting when someone is
// ahead.
func (c *Client) Lock(now time.Time, lock string, tryOnly bool) (e Effects, err error) {
	return c.LockAs(now, lock, wire.Holding{}, tryOnly)
}

// LockAs starts an attempt on lock for holding h: exclusive, shared, or one
// of h.Permits permits (docs/protocol.md change 60).
func (c *Client) LockAs(now time.Time, lock string, h wire.Holding, tryOnly bool) (e Effects, err error) {
	if err := wire.CheckLockName(lock); err != nil {
		return e, err
	}
	if err := h.Check(); err != nil {
		return e, err
	}
	if a := c.attempts[lock]; a != nil {
		return e, fmt.Errorf("bakery: an attempt on %q is already in progress", lock)
	}
	if err := c.EpochConflict(); err != nil {
		return e, err
	}
	if c.reopen {
		if err := c.openSession(now, &e); err != nil {
			return e, err
		}
		c.reopen, c.reopenAt = false, time.Time{}
	}
	if err := c.maxHoldFits(); err != nil {
		return e, err
	}
	_, err = c.startAttempt(now, lock, h, tryOnly, &e)
	return e, err
}

// startAttempt starts a new attempt on lock for holding h: its GET-TICKET.
func (c *Client) startAttempt(now time.Time, lock string, h wire.Holding, tryOnly bool, e *Effects) (*attempt, error) {
	a := &attempt{lock: lock, holding: h, att: c.nextAtt, sess: c.sess, phase: phaseGetTicket, tryOnly: tryOnly, since: now}
	c.forgetExit(lock) // this attempt's statements supersede the last one's Exit
	c.nextAtt++
	c.attempts[lock] = a
	a.doorway = c.sign(&wire.Statement{Lock: lock, Client: c.id, Session: a.sess, Attempt: a.att, Phase: wire.PhaseDoorway, Mode: h.Mode, Permits: h.Permits})
	a.reqDoorway = c.req()
	c.byReq[a.reqDoorway] = a
	a.views = quorum.NewAccess[wire.SignedView](c.q)
	c.access(a, "doorway")
	c.toAll(e, &wire.Message{Submit: &wire.Submit{Req: a.reqDoorway, Statement: a.doorway}})
	return a, nil
}

func (c *Client) onView(now time.Time, a *attempt, s wire.ServerID, sv wire.SignedView, e *Effects) {
	v, err := sv.Verify(c.cfg.Keys)
	if err == nil && (v.Server != s || v.Lock != a.lock || v.For != c.id || v.ForSession != a.sess || v.ForAttempt != a.att) {
		err = fmt.Errorf("bakery: view by %s is not for this attempt", s)
	}
	if err != nil {
		a.views.Reject(s, err)
		return
	}
	if !a.views.Offer(s, sv) {
		return
	}
	// GET-TICKET done: J = exactly q views, N = 1 + max(...) (§3.1).
	at := Attempt{Lock: a.lock, Client: c.id, Session: a.sess, Attempt: a.att}
	j, n, err := c.justify(a.views.Replies(), at)
	if errors.Is(err, ErrTicketCap) && a.views.Count() < c.cfg.N {
		// Some view carries an inflated ticket (a faulty server showing a
		// colluding client's statement, §4, §8): wait for more views and
		// try q of them without the outlier.
		return
	}
	if err != nil {
		c.exit(a, Failed, err, e)
		return
	}
	a.j, a.n = j, n
	h := wire.JustificationHash(a.j)
	a.ticket = c.sign(&wire.Statement{Lock: a.lock, Client: c.id, Session: a.sess, Attempt: a.att, Phase: wire.PhaseTicket, N: n, JHash: &h, Mode: a.holding.Mode, Permits: a.holding.Permits})
	a.phase = phaseSetTicket
	a.since = now
	a.reqTicket = c.req()
	c.byReq[a.reqTicket] = a
	a.members = quorum.NewAccess[[]memberClaim](c.q)
	a.refs = true // answers by reference first (change 44)
	c.access(a, "ticket")
	c.toAll(e, a.ticketSubmit())
}

// justify picks J: the first q views, or, if their ticket reaches the cap,
// the first q-subset (in arrival order) whose ticket does not. At most
// C(n, q) subsets: 120 for n = 10.
func (c *Client) justify(replies []quorum.Reply[wire.SignedView], at Attempt) ([]wire.SignedView, uint64, error) {
	var firstErr error
	idx := make([]int, c.q)
	for i := range idx {
		idx[i] = i
	}
	for {
		j := make([]wire.SignedView, c.q)
		for i, k := range idx {
			j[i] = replies[k].Value
		}
		n, err := TicketFromJustification(j, c.cfg.Keys, c.q, at, c.verify, nil)
		if err == nil {
			return j, n, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if !errors.Is(err, ErrTicketCap) {
			return nil, 0, err
		}
		// Next combination of q indices out of len(replies).
		i := c.q - 1
		for i >= 0 && idx[i] == len(replies)-c.q+i {
			i--
		}
		if i < 0 {
			return nil, 0, firstErr
		}
		idx[i]++
		for k := i + 1; k < c.q; k++ {
			idx[k] = idx[k-1] + 1
		}
	}
}
