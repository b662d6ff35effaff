package agent

import (
	"context"
	"net/http"
	"time"

	"github.com/bq-lock/bq"
)

// handleAcquire is POST /v1/locks/{name}/acquire: take the lock and answer
// the hold; it is held until DELETE /v1/holds/{lock_id}, its ttl, or a loss.
func (a *Agent) handleAcquire(w http.ResponseWriter, r *http.Request) {
	var req acquireRequest
	if e := decodeBody(w, r, &req); e != nil {
		writeError(w, e)
		return
	}
	if req.Ping != nil {
		writeError(w, badField("ping", "ping is for hold streams (POST /v1/locks/{name}/hold)"))
		return
	}
	p, e := a.parseAcquire(r.PathValue("name"), req)
	if e != nil {
		writeError(w, e)
		return
	}
	h, e := a.acquire(r.Context(), p)
	if e != nil {
		writeError(w, e)
		return
	}
	if err := writeJSON(w, http.StatusOK, h.view(time.Now())); (err != nil || r.Context().Err() != nil) && p.requestID == "" {
		// Nobody will know its lock_id: give it back. (With a request_id,
		// a retry may still claim it: see acquireOnce.)
		h.askRelease()
	}
}

// handleHold is POST /v1/locks/{name}/hold: a stream that takes the lock,
// says so, pings while it holds, and says lost before it ends; closing it
// releases the lock.
func (a *Agent) handleHold(w http.ResponseWriter, r *http.Request) {
	var req acquireRequest
	if e := decodeBody(w, r, &req); e != nil {
		writeError(w, e)
		return
	}
	if req.RequestID != "" {
		writeError(w, badField("request_id", "request_id is for acquire: a hold stream's hold ends with the stream, so a retry cannot find it"))
		return
	}
	p, e := a.parseAcquire(r.PathValue("name"), req)
	if e != nil {
		writeError(w, e)
		return
	}
	a.serveHold(w, r, p, "acquired", func(ctx context.Context) (*bq.Holding, *bq.Leadership, error) {
		hd, err := a.take(ctx, p)
		return hd, nil, err
	})
}

// serveHold answers a hold stream (a lock's, or a campaign's: first names
// the event that says it holds): it takes a place for the stream and room
// for the hold, waits for take while it pings, and keeps the hold until
// it ends or the caller closes the stream.
func (a *Agent) serveHold(w http.ResponseWriter, r *http.Request, p acquireParams, first string, take func(context.Context) (*bq.Holding, *bq.Leadership, error)) {
	done, e := a.openStream()
	if e != nil {
		writeError(w, e)
		return
	}
	defer done()
	if e := a.holds.reserve(); e != nil {
		writeError(w, e)
		return
	}
	st := startStream(w)
	ctx, cancel := a.bound(r.Context())
	defer cancel()
	h, ok := a.waitHolding(ctx, st, p, take)
	if !ok {
		return
	}
	a.keepStream(r.Context(), st, h, p.ping, first)
}

// waitHolding runs take for a stream, pinging the caller while it waits.
// It returns the hold, or false once it told the caller why there is none
// (or the caller left; a holding taken as it left is released).
func (a *Agent) waitHolding(ctx context.Context, st *stream, p acquireParams, take func(context.Context) (*bq.Holding, *bq.Leadership, error)) (*hold, bool) {
	type result struct {
		hd  *bq.Holding
		l   *bq.Leadership
		err error
	}
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := make(chan result, 1)
	go func() {
		hd, l, err := take(tctx)
		res <- result{hd, l, err}
	}()
	ping := time.NewTicker(p.ping)
	defer ping.Stop()
	left := func() {
		cancel()
		if r := <-res; r.err == nil {
			a.newHold(p, r.hd, r.l, true).askRelease()
		} else {
			a.holds.unreserve()
		}
	}
	if st.send(Event{Event: "waiting"}) != nil {
		left()
		return nil, false
	}
	for {
		select {
		case r := <-res:
			if r.err != nil {
				a.holds.unreserve()
				_ = st.send(Event{Event: "error", Error: fromClient(r.err)})
				return nil, false
			}
			return a.newHold(p, r.hd, r.l, true), true
		case <-ping.C:
			if st.send(Event{Event: "ping"}) != nil {
				left()
				return nil, false
			}
		case <-ctx.Done():
			left()
			if context.Cause(ctx) == errStopping {
				_ = st.send(Event{Event: "error", Error: &Error{Code: CodeAgentStopping, Message: "the agent is shutting down"}})
			}
			return nil, false
		}
	}
}

// keepStream says first (acquired, or leader) and then pings while h
// lasts: each time its valid_until moves on (every lease renewal, about a
// third of the TTL), and at least every interval; so a caller that holds the
// agent to the last valid_until it heard never takes a renewed hold for
// lost. Once h ends it says lost (with why) or released, and keeps the
// stream open until the caller closes it, which releases a lost hold at
// once, or until the agent has released it. A caller that closes it first
// releases the hold.
func (a *Agent) keepStream(ctx context.Context, st *stream, h *hold, every time.Duration, first string) {
	v0 := h.view(time.Now())
	if st.send(Event{Event: first, Hold: v0}) != nil {
		h.askRelease()
		return
	}
	lastSent, lastUntil := time.Now(), v0.ValidUntil
	look := time.NewTicker(min(every, renewalLook))
	defer look.Stop()
	for {
		select {
		case now := <-look.C:
			v := h.view(now)
			if v.State != stateHeld || !v.Valid {
				continue // the hold's end is about to be said
			}
			moved := lastUntil == nil || v.ValidUntil.After(*lastUntil)
			if !moved && now.Sub(lastSent) < every {
				continue
			}
			if st.send(Event{Event: "ping", ValidUntil: v.ValidUntil}) != nil {
				h.askRelease()
				return
			}
			lastSent, lastUntil = now, v.ValidUntil
		case <-h.ended:
			v := h.view(time.Now())
			ev := Event{Event: v.State, Hold: v, Reason: v.Reason, Message: v.Message}
			if st.send(ev) != nil {
				h.askRelease()
				return
			}
			select {
			case <-ctx.Done():
				h.askRelease()
			case <-h.gone:
			}
			return
		case <-ctx.Done():
			h.askRelease()
			return
		}
	}
}

// renewalLook is how often a hold stream looks whether its hold's
// valid_until moved on.
const renewalLook = 100 * time.Millisecond

// handleGetHold is GET /v1/holds/{lock_id}: the hold and whether it is
// still valid.
func (a *Agent) handleGetHold(w http.ResponseWriter, r *http.Request) {
	h := a.holdOf(w, r)
	if h == nil {
		return
	}
	_ = writeJSON(w, http.StatusOK, h.view(time.Now()))
}

// handleRelease is DELETE /v1/holds/{lock_id}: release the hold (resign a
// leadership) and answer once the servers applied it. A hold that had been
// lost answers lost (410): the work done under it may have overlapped the
// next holder's.
func (a *Agent) handleRelease(w http.ResponseWriter, r *http.Request) {
	h := a.holdOf(w, r)
	if h == nil {
		return
	}
	h.askRelease()
	ctx, cancel := context.WithTimeout(r.Context(), unlockBudget)
	defer cancel()
	select {
	case <-h.gone:
	case <-ctx.Done():
	}
	v := h.view(time.Now())
	if v.State == stateLost {
		writeError(w, &Error{Code: CodeLost, Hold: v, Message: "the hold was lost before this release (" + v.Reason + "): " + v.Message})
		return
	}
	_ = writeJSON(w, http.StatusOK, v)
}

// handleWaitHold is GET /v1/holds/{lock_id}/wait?wait=D: a long poll that
// answers the hold once it is no longer held, or when D (default 5 min, at
// most 10) passes: a caller that cannot keep a stream learns of a loss so.
func (a *Agent) handleWaitHold(w http.ResponseWriter, r *http.Request) {
	d, e := queryDuration(r, "wait", 5*time.Minute, 10*time.Minute)
	if e != nil {
		writeError(w, e)
		return
	}
	h := a.holdOf(w, r)
	if h == nil {
		return
	}
	done, e := a.openStream()
	if e != nil {
		writeError(w, e)
		return
	}
	defer done()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-h.ended:
	case <-h.g.Lost(): // said at once, before run notes it
	case <-t.C:
	case <-r.Context().Done():
		return
	case <-a.stopping:
	}
	_ = writeJSON(w, http.StatusOK, h.view(time.Now()))
}

// holdOf finds the hold the path names, or answers not found.
func (a *Agent) holdOf(w http.ResponseWriter, r *http.Request) *hold {
	id := r.PathValue("lock_id")
	h := a.holds.get(id, time.Now())
	if h == nil {
		writeError(w, &Error{Code: CodeNotFound, Field: "lock_id", Message: "no hold " + quoteID(id) + " (never taken here, or ended over " + retainEnded.String() + " ago, or the agent restarted)"})
	}
	return h
}

// quoteID quotes a lock_id for a message, cut short if long.
func quoteID(id string) string {
	if len(id) > 40 {
		id = id[:40] + "…"
	}
	return "\"" + id + "\""
}
