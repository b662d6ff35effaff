package bakery

import (
	"time"

	"github.com/bq-lock/bq/wire"
)

// Retries of requests a server refused by a rate (docs/protocol.md change
// 25): a refusal that names a RetryAfter is not counted against the
// attempt; the request goes to that server again once the time has passed,
// as long as it is still the attempt's current one. A limit of a count (no
// RetryAfter) is a refusal as before. A faulty server's refusals can delay
// only its own answer: at most one retry per server and request is pending,
// however often it refuses, so its refusals can grow nothing here.

// maxRetryAfter caps the wait a refusal can ask for.
const maxRetryAfter = 10 * time.Second

// retry is a request to send server s again at at.
// INVARIANT (Client.retries): at most one per (s, req).
type retry struct {
	at  time.Time
	s   wire.ServerID
	a   *attempt // nil: the SessionOpen of the session (req 0), or op's request
	op  *operation
	req uint64
}

// retryLater schedules the current request of a to s again if er is a
// refusal by a rate; it reports whether it did.
func (c *Client) retryLater(now time.Time, s wire.ServerID, a *attempt, er *wire.Error) bool {
	if er.Code != wire.ErrCodeLimit || er.Limit == nil || er.Limit.RetryAfterMillis == 0 || er.Req != currentReq(a) {
		return false
	}
	wait := min(time.Duration(er.Limit.RetryAfterMillis)*time.Millisecond, maxRetryAfter)
	c.retryAt(now.Add(wait), s, a, er.Req)
	return true
}

// retryAt schedules a's request req to s again at at, unless one is
// pending already.
func (c *Client) retryAt(at time.Time, s wire.ServerID, a *attempt, req uint64) {
	for _, r := range c.retries {
		if r.s == s && r.req == req {
			return
		}
	}
	c.retries = append(c.retries, retry{at: at, s: s, a: a, req: req})
}

// retryOpAt schedules operation o's request to s again at at, unless one
// is pending already: a faulty member's repeated refusals grow nothing.
// It reports whether it scheduled one.
func (c *Client) retryOpAt(at time.Time, s wire.ServerID, o *operation) bool {
	for _, r := range c.retries {
		if r.s == s && r.req == o.req {
			return false
		}
	}
	c.retries = append(c.retries, retry{at: at, s: s, op: o, req: o.req})
	return true
}

// currentReq is the request a's phase waits on.
func currentReq(a *attempt) uint64 {
	switch a.phase {
	case phaseGetTicket:
		return a.reqDoorway
	case phaseSetTicket:
		return a.reqTicket
	case phaseListen:
		return a.reqListen
	case phaseHeld:
		return a.reqHeld
	case phaseExiting:
		return a.reqExit
	}
	return 0
}

// sendRetries sends the retries that are due, for attempts still waiting
// on the same request.
func (c *Client) sendRetries(now time.Time, e *Effects) {
	kept := c.retries[:0]
	for _, r := range c.retries {
		switch {
		case now.Before(r.at):
			kept = append(kept, r)
		case r.op != nil:
			if c.ops[r.op.req] == r.op {
				e.Send = append(e.Send, Send{To: r.s, Msg: c.opRequest(r.op, r.s)})
			}
		case r.a == nil: // the session's own SessionOpen, to a member still copying (change 43)
			if c.lease != nil && !c.reopen && c.cfg.Keys.Key(r.s) != nil {
				e.Send = append(e.Send, Send{To: r.s, Msg: c.sessionOpen(c.sess)})
			}
		case c.attempts[r.a.lock] == r.a && currentReq(r.a) == r.req:
			c.resend(r.a, r.s, func(m *wire.Message) { e.Send = append(e.Send, Send{To: r.s, Msg: m}) })
		}
	}
	c.retries = kept
}

// opRequest is o's request, to send to s again: a Read, a GetSet (whose
// first Update from s is then a snapshot) or the resend of an ExitEarlier or
// CloseSession.
func (c *Client) opRequest(o *operation, s wire.ServerID) *wire.Message {
	switch {
	case o.isRead:
		return c.readMsg(o)
	case o.set != nil:
		o.snapshotDue[s] = true
		return c.getSetMsg(o)
	}
	return o.resend
}

// PendingRetries is the number of retries waiting (read only, for tests).
func (c *Client) PendingRetries() int { return len(c.retries) }
