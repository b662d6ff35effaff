package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/wire"
)

// LeaderView is an election's leader as observers see it.
type LeaderView struct {
	Client string `json:"client"`
	// Term is the leader's fencing token ("N.T"), TermInt as one integer;
	// terms only grow. Rev counts its proclamations in the term.
	Term    string `json:"term"`
	TermInt string `json:"term_int"`
	Rev     uint64 `json:"rev"`
	Value   string `json:"value"`
}

func leaderView(l *bq.Leader) *LeaderView {
	return &LeaderView{Client: l.Client.Hex(), Term: l.Term.String(), TermInt: l.Term.Integer(), Rev: l.Rev, Value: l.Value}
}

// campaignRequest is the body of a campaign stream.
type campaignRequest struct {
	Value string          `json:"value"`
	Wait  json.RawMessage `json:"wait"`
	Ping  json.RawMessage `json:"ping"`
}

// leadershipRequest is the body of proclaim and resign.
type leadershipRequest struct {
	LockID string `json:"lock_id"`
	Value  string `json:"value"`
}

func checkName(name string) *Error {
	if err := wire.CheckLockName(name); err != nil {
		return badField("name", "the name: "+trimWire(err))
	}
	return nil
}

func checkValue(v string) *Error {
	if len(v) > wire.MaxProclaimedValue {
		return badField("value", fmt.Sprintf("value: %d bytes; the servers keep at most %d", len(v), wire.MaxProclaimedValue))
	}
	return nil
}

// handleCampaign is POST /v1/elections/{name}/campaign: a stream that waits
// until this caller leads (candidates lead in the order they campaigned),
// says leader with the term, pings, and says lost before it ends; closing it
// resigns.
func (a *Agent) handleCampaign(w http.ResponseWriter, r *http.Request) {
	var req campaignRequest
	if e := decodeBody(w, r, &req); e != nil {
		writeError(w, e)
		return
	}
	name := r.PathValue("name")
	if e := checkName(name); e != nil {
		writeError(w, e)
		return
	}
	if e := checkValue(req.Value); e != nil {
		writeError(w, e)
		return
	}
	p, e := a.parseAcquire(name, acquireRequest{Wait: req.Wait, Ping: req.Ping})
	if e != nil {
		writeError(w, e)
		return
	}
	a.serveHold(w, r, p, "leader", func(ctx context.Context) (*bq.Holding, *bq.Leadership, error) {
		if p.waitSet {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, p.wait)
			defer cancel()
		}
		l, err := a.c.Election(name).Campaign(ctx, req.Value)
		return nil, l, err
	})
}

// leadership finds the leadership a body names, of the election in the path.
func (a *Agent) leadership(w http.ResponseWriter, r *http.Request, req *leadershipRequest) *hold {
	if e := decodeBody(w, r, req); e != nil {
		writeError(w, e)
		return nil
	}
	if req.LockID == "" {
		writeError(w, badField("lock_id", "lock_id: the leadership's, from the campaign's leader event"))
		return nil
	}
	h := a.holds.get(req.LockID, time.Now())
	if h == nil || h.l == nil || h.name != r.PathValue("name") {
		writeError(w, &Error{Code: CodeNotFound, Field: "lock_id", Message: fmt.Sprintf("no leadership %s of election %q here", quoteID(req.LockID), r.PathValue("name"))})
		return nil
	}
	return h
}

// handleProclaim is POST /v1/elections/{name}/proclaim: the leader changes
// its value; it answers once q servers keep it.
func (a *Agent) handleProclaim(w http.ResponseWriter, r *http.Request) {
	var req leadershipRequest
	h := a.leadership(w, r, &req)
	if h == nil {
		return
	}
	if e := checkValue(req.Value); e != nil {
		writeError(w, e)
		return
	}
	ctx, cancel := a.bound(r.Context())
	defer cancel()
	if err := h.l.Proclaim(ctx, req.Value); err != nil {
		e := fromClient(err)
		if errors.Is(err, bq.ErrNotHeld) {
			e = &Error{Code: CodeLost, Hold: h.view(time.Now()), Message: "the leadership ended: " + err.Error()}
		}
		writeError(w, e)
		return
	}
	_ = writeJSON(w, http.StatusOK, h.view(time.Now()))
}

// handleResign is POST /v1/elections/{name}/resign: as DELETE
// /v1/holds/{lock_id} of the leadership.
func (a *Agent) handleResign(w http.ResponseWriter, r *http.Request) {
	var req leadershipRequest
	h := a.leadership(w, r, &req)
	if h == nil {
		return
	}
	if req.Value != "" {
		writeError(w, badField("value", "resign takes no value"))
		return
	}
	r.SetPathValue("lock_id", h.id)
	a.handleRelease(w, r)
}

// handleLeader is GET /v1/elections/{name}/leader: the current leader, as
// f+1 of q servers' replies hold it, or no_leader (404).
func (a *Agent) handleLeader(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if e := checkName(name); e != nil {
		writeError(w, e)
		return
	}
	ctx, cancel := a.bound(r.Context())
	defer cancel()
	l, err := a.c.Election(name).Leader(ctx)
	if err != nil {
		writeError(w, fromClient(err))
		return
	}
	_ = writeJSON(w, http.StatusOK, leaderView(l))
}

// handleObserve is GET /v1/elections/{name}/observe: a stream of leader
// events, one each time the leader or its value changes, and pings.
func (a *Agent) handleObserve(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if e := checkName(name); e != nil {
		writeError(w, e)
		return
	}
	every, e := queryDuration(r, "ping", a.cfg.Ping, maxPing)
	if e != nil {
		writeError(w, e)
		return
	}
	every = max(every, minPing)
	done, e := a.openStream()
	if e != nil {
		writeError(w, e)
		return
	}
	defer done()
	ctx, cancel := a.bound(r.Context())
	defer cancel()
	el := a.c.Election(name)
	ch := el.Observe(ctx)
	st := startStream(w)
	ping := time.NewTicker(every)
	defer ping.Stop()
	// leading: the last event said a leader. Observe says only leaders; a
	// leader gone is found by reading, at most once a second.
	leading, lastRead := false, time.Time{}
	for {
		select {
		case l, ok := <-ch:
			if !ok {
				if context.Cause(ctx) == errStopping {
					_ = st.send(Event{Event: "error", Error: &Error{Code: CodeAgentStopping, Message: "the agent is shutting down"}})
				}
				return
			}
			if st.send(Event{Event: "leader", Leader: leaderView(&l)}) != nil {
				return
			}
			leading = true
		case now := <-ping.C:
			ev := Event{Event: "ping"}
			if leading && now.Sub(lastRead) >= time.Second {
				lastRead = now
				if _, err := el.Leader(ctx); errors.Is(err, bq.ErrNoLeader) {
					ev, leading = Event{Event: "no_leader"}, false
				}
			}
			if st.send(ev) != nil {
				return
			}
		}
	}
}
