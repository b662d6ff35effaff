package bakery

import (
	"fmt"
	"slices"
	"time"

	"github.com/bq-lock/bq/wire"
)

// Max-hold at the client (docs/protocol.md change 24). Each server reports
// the max-hold it applies to this client in its SessionAck; the client
// takes the (f+1)-th smallest of the current session's reports — at most f
// are a faulty server's, so it is a correct server's or lies between two —
// and gives a holding up at entered + max-hold − margin: it reports Lost
// and sends its Exit, which reaches the servers before their clocks run
// out, so the session (and any other lock held in it) is never refused.
// The servers' refusal, and the lease check behind it, stay the safety net.

// noteMaxHold records the max-hold s reported for the current session.
func (c *Client) noteMaxHold(s wire.ServerID, a *wire.SessionAck) {
	if a.Session != c.sess || a.Seq != 0 {
		return
	}
	if c.maxHolds == nil {
		c.maxHolds = make(map[wire.ServerID]time.Duration)
	}
	c.maxHolds[s] = time.Duration(a.MaxHoldMillis) * time.Millisecond
}

// MaxHold is the max-hold this client counts with in the current session:
// the (f+1)-th smallest report, a report of zero (none) counting as
// infinite; zero when fewer than f+1 servers reported a bound.
func (c *Client) MaxHold() time.Duration {
	vals := make([]time.Duration, 0, len(c.maxHolds))
	for _, d := range c.maxHolds {
		if d > 0 {
			vals = append(vals, d)
		}
	}
	if len(vals) <= c.cfg.F {
		return 0
	}
	slices.Sort(vals)
	return vals[c.cfg.F]
}

// maxHoldMargin is how long before the max-hold a holding is given up:
// the lease margin (clock drift) and a twentieth of the max-hold, so the
// Exit reaches the servers before their clocks run out.
func (c *Client) maxHoldMargin(mh time.Duration) time.Duration {
	return c.cfg.Margin + c.cfg.Grace + mh/20
}

// maxHoldFits refuses an attempt whose holding the max-hold would end
// within its margin (docs/protocol.md change 24): a client gives a holding
// up at max-hold − margin, so when the margin (the lease's ε·TTL and a
// twentieth of the max-hold) takes more than half the max-hold, a lock
// would be granted only to be taken back at once. The error says which
// bound and the longest TTL that fits.
func (c *Client) maxHoldFits() error {
	mh := c.MaxHold()
	if mh <= 0 || mh-c.maxHoldMargin(mh) >= mh/2 {
		return nil
	}
	// The TTL whose margin leaves half: the margin is ε·TTL, the loss grace
	// and mh/20, and the first two are taken to shrink with the TTL (as
	// bqclient's grace does; for a fixed grace this errs short).
	fit := time.Duration(float64(mh/2-mh/20) * float64(c.cfg.TTL) / float64(c.cfg.Margin+c.cfg.Grace))
	return fmt.Errorf("%w: the servers let this identity hold a lock for at most %v (its max-hold), and with a lease TTL of %v a holding is given up %v before that, more than half of it: use a TTL of at most %v, or ask the operator for a longer max-hold",
		ErrRefused, mh, c.cfg.TTL, c.maxHoldMargin(mh), fit.Truncate(time.Millisecond))
}

// checkMaxHold gives up every holding at its max-hold, less the margin.
func (c *Client) checkMaxHold(now time.Time, e *Effects) {
	mh := c.MaxHold()
	if mh <= 0 {
		return
	}
	for _, lock := range c.sortedLocks() {
		a := c.attempts[lock]
		if a.phase != phaseHeld || now.Before(a.entered.Add(mh-c.maxHoldMargin(mh))) {
			continue
		}
		e.Events = append(e.Events, Event{Kind: Lost, Lock: a.lock, Attempt: a.att, Token: Token{N: a.n, Client: c.id},
			Err: fmt.Errorf("%w (%v)", ErrMaxHold, mh)})
		if c.cfg.Grace <= 0 {
			c.exit(a, 0, nil, e)
			continue
		}
		// With a grace the Exit waits, as for a lease lost (changes 36,
		// 39, 40): the holder's work stops first. The margin holds it:
		// given up Margin + Grace + mh/20 before the max-hold, the Exit
		// still goes mh/20 before the servers' cut (change 41).
		var exit Effects
		c.exit(a, 0, nil, &exit)
		due := now.Add(c.cfg.Grace + c.cfg.Margin)
		if c.cfg.ExitLostOnRelease {
			due = time.Time{}
		}
		for _, s := range exit.Send {
			c.lateExits = append(c.lateExits, lateExit{lock: a.lock, due: due, msg: s.Msg})
		}
		a.exitLate = true
		c.finish(a, e)
	}
}
