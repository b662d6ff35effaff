package bakery

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// SessionSource hands out session numbers, strictly increasing across
// every process that uses one key.
type SessionSource interface {
	NextSession() (uint64, error)
}

// SessionSkipper is a SessionSource that can be told a number its client
// used before (docs/protocol.md change 67): every session it hands out
// after SkipPast(n) is above n. A source that cannot skip makes a client
// started without its counter open sessions a TTL apart until one is new.
type SessionSkipper interface {
	SkipPast(n uint64) error
}

// CountingSessions numbers sessions Last+1, Last+2, … in memory.
type CountingSessions struct{ Last uint64 }

// NextSession returns the next number.
func (s *CountingSessions) NextSession() (uint64, error) { s.Last++; return s.Last, nil }

// SkipPast makes every later number above n.
func (s *CountingSessions) SkipPast(n uint64) error { s.Last = max(s.Last, n); return nil }

// LeaseAcks counts, for the current session, the servers that acknowledged
// it and those that suspected it (for an error that says what a wait was
// for).
func (c *Client) LeaseAcks() (acked, suspected int) {
	if c.lease == nil {
		return 0, 0
	}
	return c.lease.Acked(), c.lease.Suspicions()
}

// Heartbeating reports whether the client keeps a session open: it
// heartbeats every member of its epoch, naming the epoch, so a server that
// knows a later one shows it (docs/protocol.md change 43). A session that
// failed is not reopened before the next Lock.
func (c *Client) Heartbeating() bool { return c.lease != nil && !c.reopen }

// LeaseHolds reports the lease guarantee at now.
func (c *Client) LeaseHolds(now time.Time) bool { return c.lease != nil && c.lease.Holds(now) }

// LossAt is when the current session's guarantee lapses unless acks come
// (with the grace, §5, change 34), if the session holds a lock; zero
// otherwise. A runtime ticks then, so that a loss is reported on time and
// not up to a tick late.
func (c *Client) LossAt() time.Time {
	if c.lease == nil || c.reopen || !c.holdsIn(c.sess) {
		return time.Time{}
	}
	return c.lease.ValidUntil()
}

// HeldUntil is until when the holding of lock is guaranteed: the lease
// guarantee of its session (with the grace) or, sooner, the instant its
// max-hold gives it up; zero when lock is not held in the current session
// or the guarantee does not hold at now. A holding is never lost before it,
// and may be right after: a caller asking whether it still holds compares
// its clock with this instant, not with a timer that may fire late.
func (c *Client) HeldUntil(now time.Time, lock string) time.Time {
	a := c.attempts[lock]
	if a == nil || a.phase != phaseHeld || a.sess != c.sess || c.reopen || c.lease == nil {
		return time.Time{}
	}
	until := c.lease.ValidUntil()
	if mh := c.MaxHold(); mh > 0 {
		until = minTime(until, a.entered.Add(mh-c.maxHoldMargin(mh)))
	}
	if !now.Before(until) {
		return time.Time{}
	}
	return until
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// LeaseValidUntil is when the lease guarantee lapses unless new acks arrive
// (zero if it never held in this session).
func (c *Client) LeaseValidUntil() time.Time {
	if c.lease == nil {
		return time.Time{}
	}
	return c.lease.ValidUntil()
}

// SessionRefused returns an ErrRefused once so many servers refused the
// current session (a lease TTL out of their bounds, too many sessions of this
// identity, a ban) that fewer than q are left to accept it; nil before. It
// takes n−q+1 servers, so at least one correct one: a faulty server alone
// cannot make a session fail. The reasons are the servers' own, the most
// common first.
func (c *Client) SessionRefused() error {
	if c.cfg.N-len(c.sessionRefusals) >= c.q {
		return nil
	}
	count := make(map[string]int)
	by := make(map[wire.ServerID]error, len(c.sessionRefusals))
	for s, r := range c.sessionRefusals {
		count[fmt.Sprintf("%s: %s", r.code, r.detail)]++
		by[s] = r
	}
	reasons := make([]string, 0, len(count))
	for why := range count {
		reasons = append(reasons, why)
	}
	sort.Slice(reasons, func(i, j int) bool {
		if count[reasons[i]] != count[reasons[j]] {
			return count[reasons[i]] > count[reasons[j]]
		}
		return reasons[i] < reasons[j]
	})
	for i, why := range reasons {
		reasons[i] = fmt.Sprintf("%s (%d of %d servers)", why, count[why], c.cfg.N)
	}
	return c.newRefusal(ErrRefused, "the session", "", by, fmt.Sprintf("%v: the session: %s", ErrRefused, strings.Join(reasons, "; ")))
}

// Start opens the first session. It fails only if no session number can be
// had (the SDK's counter cannot be written).
func (c *Client) Start(now time.Time) (e Effects, err error) {
	err = c.openSession(now, &e)
	return e, err
}

// openSession opens the next session from cfg.Sessions.
func (c *Client) openSession(now time.Time, e *Effects) error {
	sess, err := c.cfg.Sessions.NextSession()
	if err != nil {
		return fmt.Errorf("bakery: no session number: %w", err)
	}
	if sess <= c.sess {
		return fmt.Errorf("bakery: session source went back (%d after %d)", sess, c.sess)
	}
	c.sess = sess
	c.exited, c.exitedOrder = nil, nil // the old session's Exits: a reset voids what they would end
	c.sessionRefusals = nil
	c.maxHolds = nil
	c.knownBy = nil
	c.lease = quorum.NewLease(c.q, c.cfg.TTL, c.cfg.Margin+c.cfg.Grace, sess)
	c.leaseHeld = false
	c.opened = now
	c.hbSeq = 0
	c.lease.Sent(0, now)
	c.nextHB = now.Add(c.cfg.TTL / 3)
	c.toAll(e, c.sessionOpen(sess))
	return nil
}

// Tick sends heartbeats and checks the lease guarantee.
func (c *Client) Tick(now time.Time) (e Effects) {
	c.sendLateExits(now, &e)
	if c.reopen && !c.reopenAt.IsZero() && !now.Before(c.reopenAt) {
		// A session that never held is replaced at once (change 34): the
		// client is still trying to join, and a fresh session is what a
		// quorum that answers now can acknowledge.
		if err := c.openSession(now, &e); err == nil {
			c.reopen, c.reopenAt = false, time.Time{}
		}
	}
	// Retries go out with or without a session: a Read or GetSet needs
	// none (found by the campaign: a reader whose session was reset never
	// sent its Read to a member that had been copying).
	c.sendRetries(now, &e)
	if c.lease == nil || c.reopen {
		return e
	}
	if !now.Before(c.nextHB) {
		c.hbSeq++
		c.lease.Sent(c.hbSeq, now)
		c.nextHB = now.Add(c.cfg.TTL / 3)
		c.toAll(&e, &wire.Message{Heartbeat: &wire.Heartbeat{Session: c.sess, Seq: c.hbSeq, Epoch: c.cfg.Keys.Epoch}})
	}
	c.unholdIfSuspected(now, &e)
	c.checkLease(now, &e)
	c.checkMaxHold(now, &e)
	return e
}

// checkLease reports held locks as Lost the moment the guarantee fails, and
// leaves the session: the servers will reset it, and the next Lock opens a new one.
func (c *Client) checkLease(now time.Time, e *Effects) {
	if c.reopen {
		return // between sessions: nothing is held, nothing to check
	}
	holds := c.lease.Holds(now)
	stuck := c.stuck(now, holds)
	if holds && !stuck {
		c.leaseHeld = true
		for _, lock := range c.sortedLocks() {
			if a := c.attempts[lock]; a.phase == phaseListen {
				c.decide(now, a, e)
				c.relisten(now, a, e)
			}
		}
		return
	}
	if !stuck && !c.leaseHeld && c.lease.Suspicions() <= c.cfg.N-c.q {
		return // still starting up, and the guarantee can still come
	}
	c.abandonSession(now, e)
}

// abandonSession ends the current session: its guarantee failed (or, change
// 67, it can never come), so every attempt of it is over.
func (c *Client) abandonSession(now time.Time, e *Effects) {
	// The guarantee failed: every attempt of this session is over.
	for _, lock := range c.sortedLocks() {
		a := c.attempts[lock]
		if a.sess != c.sess {
			continue
		}
		// The attempt ends now: the session is abandoned, so its statements
		// will be reset anyway. The Exit is sent best effort, not waited for
		// (the servers that made us lose the lease may never answer).
		switch a.phase {
		case phaseHeld:
			e.Events = append(e.Events, Event{Kind: Lost, Lock: a.lock, Attempt: a.att, Token: Token{N: a.n, Client: c.id}, Err: ErrLeaseLost})
			// The Exit waits out the loss grace and the margin: sent now,
			// it would hand the lock on while the holder's work is still
			// stopping. With it, a session that heals hands the lock on no
			// earlier than one that does not (docs/protocol.md change 36).
			var held Effects
			c.exit(a, 0, nil, &held)
			a.exitLate = c.cfg.Grace > 0
			if c.cfg.Grace > 0 {
				due := now.Add(c.cfg.Grace + c.cfg.Margin)
				if c.cfg.ExitLostOnRelease {
					due = time.Time{} // change 39: at ReleaseLost
				}
				for _, s := range held.Send {
					c.lateExits = append(c.lateExits, lateExit{lock: a.lock, due: due, msg: s.Msg})
				}
			} else {
				e.Send = append(e.Send, held.Send...)
			}
		case phaseExiting:
		default:
			c.exit(a, Failed, ErrLeaseLost, e)
		}
		c.finish(a, e)
	}
	c.reopen = true
	if !c.leaseHeld {
		// The session failed before its guarantee ever held (the client
		// reached too few servers, and those suspected it while it was cut
		// off): nothing waits for a Lock to open the next one, so it opens
		// now, at most one a TTL (docs/protocol.md change 34).
		c.reopenAt = c.opened.Add(c.cfg.TTL)
		if c.reopenAt.Before(now) {
			c.reopenAt = now
		}
	}
}

// sendLateExits sends the lost holdings' Exits that are due (lateExits),
// once, to every server.
func (c *Client) sendLateExits(now time.Time, e *Effects) {
	keep := c.lateExits[:0]
	sent := make(map[*wire.Message]bool)
	for _, le := range c.lateExits {
		switch {
		case le.due.IsZero() || now.Before(le.due):
			keep = append(keep, le)
		case !sent[le.msg]:
			sent[le.msg] = true
			c.toAll(e, le.msg)
			c.rememberExit(le.lock, le.msg.Submit.Statement)
		}
	}
	c.lateExits = keep
}

// ReleaseLost sends the Exit of lock's lost holding now, if it waits
// (ExitLostOnRelease, or the grace): the caller's work has stopped
// (docs/protocol.md change 39). It reports whether an Exit waited.
func (c *Client) ReleaseLost(lock string) (e Effects, waited bool) {
	keep := c.lateExits[:0]
	sent := make(map[*wire.Message]bool)
	for _, le := range c.lateExits {
		switch {
		case le.lock != lock:
			keep = append(keep, le)
		case !sent[le.msg]:
			sent[le.msg], waited = true, true
			c.toAll(&e, le.msg)
			c.rememberExit(le.lock, le.msg.Submit.Statement)
		}
	}
	c.lateExits = keep
	return e, waited
}

// stuck reports a session that may never make progress: a server that
// suspected it refuses it for good, so the client depends on the others,
// and up to f of those may be faulty and never answer while still acking
// heartbeats. Once an access (GET-TICKET, SET-TICKET, or LISTEN before q
// servers reported) of the session has waited a TTL with such a suspicion,
// or the guarantee has not come a TTL after the session opened, the client
// starts over in a new session instead of waiting forever (found by the
// simulator, test/sim). So does a LISTEN held for a TTL by a member reported
// in its Doorway (change 21): with one server refusing the session, a faulty
// one can keep showing a Doorway the correct ones lack, and the absence rule
// never gathers q reports.
func (c *Client) stuck(now time.Time, holds bool) bool {
	if c.lease.Suspicions() == 0 {
		return false
	}
	if !holds && !c.leaseHeld && now.Sub(c.opened) >= c.cfg.TTL {
		return true
	}
	for _, a := range c.attempts {
		if a.sess != c.sess || now.Sub(a.since) < c.cfg.TTL {
			continue
		}
		// LISTEN counts only until q servers have reported: waiting after
		// that for a member with a ticket ahead is waiting for the lock,
		// which may rightly take long; waiting a TTL for one to choose is not.
		if a.phase == phaseGetTicket || a.phase == phaseSetTicket || (a.phase == phaseListen && len(a.heard) < c.q) {
			return true
		}
		if a.phase == phaseListen && c.choosingTooLong(now, a) {
			return true
		}
	}
	return false
}

// choosingTooLong reports a member a's LISTEN has not passed whose highest
// reported statement has been a Doorway for a TTL.
func (c *Client) choosingTooLong(now time.Time, a *attempt) bool {
	for _, x := range a.others {
		r := a.reports[x]
		if !r.passed && !r.choosingSince.IsZero() && now.Sub(r.choosingSince) >= c.cfg.TTL {
			return true
		}
	}
	return false
}

// CloseSession ends the current session (SessionClose): servers reset it at
// once instead of after its lease. Call it last, after every attempt ended.
// It completes with a Released event (no lock) carrying the operation id
// once q members acked and each member of waitFor (those the runtime is
// connected to) answered, so that a process that closes and exits leaves
// the session live nowhere it could reach; the caller bounds the wait.
func (c *Client) CloseSession(waitFor ...wire.ServerID) (op uint64, e Effects) {
	o := &operation{id: c.req(), exitAcks: quorum.NewAccess[struct{}](c.q)}
	o.req = o.id
	for _, s := range waitFor {
		if c.cfg.Keys.Key(s) != nil {
			if o.waitFor == nil {
				o.waitFor = map[wire.ServerID]bool{}
			}
			o.waitFor[s] = true
		}
	}
	c.ops[o.req] = o
	o.resend = &wire.Message{SessionClose: &wire.SessionClose{Req: o.req, Session: c.sess}}
	c.toAll(&e, o.resend)
	return o.id, e
}

// holdsIn reports whether an attempt of session sess holds its lock or is
// releasing it.
func (c *Client) holdsIn(sess uint64) bool {
	for _, a := range c.attempts {
		if a.sess == sess && (a.phase == phaseHeld || a.phase == phaseExiting) {
			return true
		}
	}
	return false
}

// sessionOpen opens or reopens session sess. It names the client's epoch, so
// a server that knows a later one shows it (docs/protocol.md change 43), and
// carries the client's signature on the session and its TTL (change 48),
// made once a session: every server gets the same bytes.
func (c *Client) sessionOpen(sess uint64) *wire.Message {
	ttl := uint32(c.cfg.TTL / time.Millisecond)
	if c.open == nil || c.openSess != sess {
		o, err := wire.SignOpen(c.cfg.Key, c.cfg.Keys.Cluster, sess, ttl)
		if err != nil {
			panic(fmt.Sprintf("bakery: signing a session open: %v", err)) // our own struct always encodes: a bug
		}
		c.open, c.openSess = &o, sess
	}
	return &wire.Message{SessionOpen: &wire.SessionOpen{Session: sess, TTLMillis: ttl, Epoch: c.cfg.Keys.Epoch, Signed: c.open}}
}

// noteNumbering takes what server s said, refusing the current session, of
// how far this client's numbering has gone (docs/protocol.md change 67): a
// session number the client's own signed open proves, one a certificate of
// q votes proves, or one that f+1 servers name. If that floor is at or
// above the current session, the session source skips past it; and if the
// session never held its guarantee, the next one opens now, above the
// floor, instead of a TTL later. A faulty server can show only what the
// client signed or q servers certified, and raise the unsigned count with
// f others at most, so the client skips only past numbers it really used.
func (c *Client) noteNumbering(now time.Time, s wire.ServerID, a *wire.SessionAck, e *Effects) {
	if a.LeaseOK || a.Session != c.sess || a.Known == 0 && a.Newer == nil && a.Reset == nil {
		return
	}
	floor := uint64(0)
	if a.Newer != nil {
		if b, err := a.Newer.Verify(c.cfg.Keys.Cluster); err == nil && b.Client == c.id {
			floor = max(floor, b.Session)
		}
	}
	if cert := a.Reset; cert != nil && cert.Client == c.id && cert.Verify(c.cfg.Keys, c.q) == nil {
		floor = max(floor, cert.Session)
	}
	if a.Known > 0 {
		if c.knownBy == nil {
			c.knownBy = map[wire.ServerID]uint64{}
		}
		c.knownBy[s] = a.Known
		if len(c.knownBy) > c.cfg.F {
			known := make([]uint64, 0, len(c.knownBy))
			for _, k := range c.knownBy {
				known = append(known, k)
			}
			slices.Sort(known)
			floor = max(floor, known[len(known)-1-c.cfg.F]) // the (f+1)-th highest
		}
	}
	if floor < c.sess {
		return
	}
	sk, ok := c.cfg.Sessions.(SessionSkipper)
	if !ok || sk.SkipPast(floor) != nil {
		return
	}
	c.Stats.NumberingSkips++
	if c.leaseHeld || c.reopen && c.reopenAt.IsZero() {
		return // the next session, opened when one is needed, is above the floor
	}
	// It never held: it ends now, and its successor opens at once.
	c.abandonSession(now, e)
	c.reopenAt = now
}
