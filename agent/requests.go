package agent

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// An acquire with a request_id (etcd-cpp-apiv3#115: a caller whose acquire
// timed out on its side cannot tell whether it got the lock). The attempt
// is the agent's, not the request's: a retry with the same lock name and
// request_id joins the attempt in progress, or gets the hold it took, with
// the same lock_id and token. An attempt that every caller left goes on for
// the claim window, so that a retry can still find it; an attempt that
// took its hold when no caller was there gives it back unless a retry
// claims it within the window. A request_id whose hold ended answers
// request_used, with how it ended, for as long as the agent remembers ended
// holds.

// reqKey names an attempt: request ids are per lock name.
type reqKey struct{ name, id string }

// attempt is one acquire with a request id.
type attempt struct {
	key    reqKey
	p      acquireParams
	done   chan struct{} // closed once hold or err is set
	hold   *hold
	err    *Error
	cancel context.CancelFunc
	// callers is how many requests wait on it now; claimed is set once a
	// request took its hold; idle, when no caller waits, runs out the claim
	// window. All three under requests.mu.
	callers int
	claimed bool
	idle    *time.Timer
}

// requests are the attempts by request id.
// INVARIANT: an attempt in byKey either is in progress (its room reserved
// in the hold table) or took a hold; a failed one is dropped at once, so a
// retry tries again. len(byKey) ≤ max.
type requests struct {
	mu    sync.Mutex
	byKey map[reqKey]*attempt
	max   int
}

func (a *Agent) acquireOnce(ctx context.Context, p acquireParams) (*hold, *Error) {
	rs := &a.requests
	key := reqKey{p.name, p.requestID}
	rs.mu.Lock()
	at := rs.byKey[key]
	switch {
	case at != nil && !at.p.same(p):
		rs.mu.Unlock()
		return nil, &Error{Code: CodeConflict, Field: "request_id", Message: fmt.Sprintf(
			"request_id %q was used for %q with other parameters (mode, permits, try, ttl): a retry must ask the same", p.requestID, p.name)}
	case at != nil && at.hold != nil:
		h := at.hold
		now := time.Now()
		if v := h.view(now); v.State != stateHeld {
			rs.mu.Unlock()
			return nil, &Error{Code: CodeRequestUsed, Field: "request_id", Hold: v, Message: fmt.Sprintf(
				"request_id %q took hold %s of %q, which is %s: a new acquire needs a new request_id", p.requestID, h.id, p.name, v.State)}
		}
		at.claimed = true
		rs.mu.Unlock()
		return h, nil
	case at == nil:
		rs.forgetEnded(time.Now())
		if len(rs.byKey) >= rs.max {
			rs.mu.Unlock()
			return nil, &Error{Code: CodeTooMany, Message: "the agent remembers as many request ids as it takes: retry later, or acquire without a request_id"}
		}
		if e := a.holds.reserve(); e != nil {
			rs.mu.Unlock()
			return nil, e
		}
		actx, cancel := a.bound(context.Background())
		at = &attempt{key: key, p: p, done: make(chan struct{}), cancel: cancel}
		rs.byKey[key] = at
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.runAttempt(actx, at)
		}()
	}
	at.callers++
	if at.idle != nil {
		at.idle.Stop()
		at.idle = nil
	}
	rs.mu.Unlock()

	// This caller waits its own wait (the attempt may wait longer for an
	// earlier caller's, or less: a retry cannot stretch it).
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if p.waitSet && !p.try {
		wctx, cancel = context.WithTimeout(ctx, p.wait)
	}
	defer cancel()
	select {
	case <-at.done:
	case <-wctx.Done():
	}

	rs.mu.Lock()
	defer rs.mu.Unlock()
	at.callers--
	select {
	case <-at.done:
		if at.hold != nil && ctx.Err() == nil {
			at.claimed = true
			return at.hold, nil
		}
		if at.err != nil {
			return nil, at.err
		}
	default:
	}
	if at.callers == 0 {
		a.idleAttempt(at)
	}
	if ctx.Err() != nil {
		return nil, fromClient(ctx.Err())
	}
	return nil, &Error{Code: CodeTimeout, Message: fmt.Sprintf(
		"timed out after %v waiting for %q; the acquire of request_id %q goes on for %v: retry with it to join", p.wait, p.name, p.requestID, a.cfg.ClaimWindow)}
}

// idleAttempt starts at's claim window: when it runs out with no caller
// back, an attempt in progress is abandoned and a hold nobody claimed is
// released. rs.mu must be held.
func (a *Agent) idleAttempt(at *attempt) {
	at.idle = time.AfterFunc(a.cfg.ClaimWindow, func() {
		rs := &a.requests
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if at.callers > 0 || at.claimed {
			return
		}
		select {
		case <-at.done:
			if at.hold != nil {
				a.log.Info("released a hold nobody claimed", "lock", at.p.name, "request_id", at.p.requestID, "lock_id", at.hold.id)
				at.hold.askRelease()
			}
		default:
			at.cancel()
		}
	})
}

// runAttempt takes at's lock and notes the hold or the error.
func (a *Agent) runAttempt(ctx context.Context, at *attempt) {
	defer at.cancel()
	p := at.p
	p.wait, p.waitSet = 0, false // its callers' waits bound them, not it (idleAttempt does)
	hd, err := a.take(ctx, p)
	rs := &a.requests
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if err != nil {
		a.holds.unreserve()
		at.err = fromClient(err)
		delete(rs.byKey, at.key)
		close(at.done)
		return
	}
	at.hold = a.newHold(at.p, hd, nil, false)
	close(at.done)
	if at.callers == 0 {
		a.idleAttempt(at)
	}
}

// forgetEnded drops the attempts whose hold the table forgot. rs.mu must be
// held.
func (rs *requests) forgetEnded(now time.Time) {
	for k, at := range rs.byKey {
		if at.hold == nil {
			continue
		}
		at.hold.mu.Lock()
		gone := at.hold.state != stateHeld && now.Sub(at.hold.endedAt) >= retainEnded
		at.hold.mu.Unlock()
		if gone {
			delete(rs.byKey, k)
		}
	}
}
