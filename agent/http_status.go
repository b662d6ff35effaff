package agent

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bq-lock/bq"
)

// LockStatusView is a lock's state as the API shows it: every participant
// carries a verified signature (a faulty server can hide members or repeat
// old statements, not invent them).
type LockStatusView struct {
	Lock string `json:"lock"`
	// Index grows each time the agent saw the lock's state change; pass it
	// back as ?index= to wait for the next change. It starts again when the
	// agent restarts (or stops watching the lock): an index that went back
	// means "start over".
	Index     uint64            `json:"index"`
	Epoch     uint64            `json:"epoch"`
	Servers   ServersView       `json:"servers"`
	Holders   []ParticipantView `json:"holders"`
	Queue     []ParticipantView `json:"queue"`
	Suspected []FlaggedView     `json:"suspected"`
	Banned    []FlaggedView     `json:"banned"`
}

// ServersView is how many servers a view is of, and answered.
type ServersView struct {
	N         int `json:"n"`
	F         int `json:"f"`
	Quorum    int `json:"quorum"`
	Reachable int `json:"reachable"`
}

// ParticipantView is one client in a lock's set.
type ParticipantView struct {
	Client string `json:"client"`
	// Name is the client's enrolled name, when f+1 servers say the same.
	Name string `json:"name,omitempty"`
	// State is "holding", "waiting" (with a ticket) or "choosing a ticket";
	// Phase is the bakery's name of it.
	State      string `json:"state"`
	Phase      string `json:"phase"`
	Mode       string `json:"mode"`
	Permits    int    `json:"permits,omitempty"`
	Ticket     uint64 `json:"ticket"`
	Token      string `json:"token,omitempty"`
	TokenInt   string `json:"token_int,omitempty"`
	ReportedBy int    `json:"reported_by"`
}

// FlaggedView is a client some servers suspect or banned.
type FlaggedView struct {
	Client     string `json:"client"`
	ReportedBy int    `json:"reported_by"`
}

func statusView(name string, index uint64, st *bq.Status) *LockStatusView {
	v := &LockStatusView{
		Lock: name, Index: index, Epoch: st.Epoch,
		Servers:   ServersView{N: st.N, F: st.F, Quorum: st.Quorum, Reachable: st.Reachable},
		Holders:   []ParticipantView{},
		Queue:     []ParticipantView{},
		Suspected: []FlaggedView{},
		Banned:    []FlaggedView{},
	}
	l := st.Lock
	if l == nil {
		return v
	}
	pv := func(p bq.Participant) ParticipantView {
		out := ParticipantView{
			Client: p.Client.Hex(), Name: p.Name, State: p.State(), Phase: strings.ToLower(p.Phase.String()),
			Mode: modeName(p.Mode), Ticket: p.Ticket, ReportedBy: p.ReportedBy,
		}
		if p.Mode.Permits > 0 {
			out.Permits = int(p.Mode.Permits)
		}
		if p.Ticket > 0 {
			out.Token, out.TokenInt = p.Token().String(), p.Token().Integer()
		}
		return out
	}
	for _, p := range l.Holders {
		v.Holders = append(v.Holders, pv(p))
	}
	for _, p := range l.Queue {
		v.Queue = append(v.Queue, pv(p))
	}
	for _, f := range l.Suspected {
		v.Suspected = append(v.Suspected, FlaggedView{f.Client.Hex(), f.ReportedBy})
	}
	for _, f := range l.Banned {
		v.Banned = append(v.Banned, FlaggedView{f.Client.Hex(), f.ReportedBy})
	}
	return v
}

// lockWatch is the agent's watch of one lock's state, for the status reads
// and long polls of that lock: one WatchStatus however many callers poll.
// INVARIANT: changed is closed and replaced each time index grows; index
// and st change together.
type lockWatch struct {
	name    string
	cancel  context.CancelFunc
	mu      sync.Mutex
	index   uint64
	st      *bq.Status
	changed chan struct{}
	// refs counts the requests using it now; idle ends it once nobody has
	// for watchIdle (under watches.mu).
	refs int
	idle *time.Timer
}

// watchIdle is how long a lock stays watched after its last reader.
const watchIdle = time.Minute

// watches are the agent's lock watches by name.
// INVARIANT: len(byName) ≤ max.
type watches struct {
	mu     sync.Mutex
	byName map[string]*lockWatch
	max    int
}

// watch returns the lock's watch, started if need be; the caller gives it
// back with unwatch.
func (a *Agent) watch(name string) (*lockWatch, *Error) {
	ws := &a.watches
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.byName[name]
	if w == nil {
		if len(ws.byName) >= ws.max {
			return nil, &Error{Code: CodeTooMany, Message: fmt.Sprintf("the agent watches %d locks' status already (--max-watches): poll fewer locks", ws.max)}
		}
		ctx, cancel := context.WithCancel(a.stopCtx)
		ch, err := a.c.WatchStatus(ctx, name)
		if err != nil {
			cancel()
			return nil, badField("name", "the lock's name: "+err.Error())
		}
		w = &lockWatch{name: name, cancel: cancel, changed: make(chan struct{})}
		ws.byName[name] = w
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			for st := range ch { // closed once ctx ends
				w.mu.Lock()
				w.index++
				w.st = st
				close(w.changed)
				w.changed = make(chan struct{})
				w.mu.Unlock()
			}
		}()
	}
	if w.idle != nil {
		w.idle.Stop()
		w.idle = nil
	}
	w.refs++
	return w, nil
}

func (a *Agent) unwatch(w *lockWatch) {
	ws := &a.watches
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w.refs--; w.refs > 0 {
		return
	}
	w.idle = time.AfterFunc(watchIdle, func() {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		if w.refs == 0 && ws.byName[w.name] == w {
			delete(ws.byName, w.name)
			w.cancel()
		}
	})
}

// handleStatus is GET /v1/locks/{name}[?index=N&wait=D]: the lock's state;
// with index, a long poll that answers once the state's index is not N, or
// when D (default 5 min, at most 10) passes — with the same index then,
// like Consul's blocking queries (an answer is no proof of a change).
func (a *Agent) handleStatus(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	q := r.URL.Query()
	var index uint64
	blocking := q.Has("index")
	if blocking {
		var err error
		if index, err = strconv.ParseUint(q.Get("index"), 10, 64); err != nil {
			writeError(w, badField("index", "index: want the index of an earlier answer, a whole number"))
			return
		}
	}
	d, e := queryDuration(r, "wait", 5*time.Minute, 10*time.Minute)
	if e != nil {
		writeError(w, e)
		return
	}
	if err := checkName(name); err != nil {
		writeError(w, err)
		return
	}
	done, e := a.openStream()
	if e != nil {
		writeError(w, e)
		return
	}
	defer done()
	lw, e := a.watch(name)
	if e != nil {
		writeError(w, e)
		return
	}
	defer a.unwatch(lw)

	first := time.NewTimer(firstStatusWait)
	defer first.Stop()
	var limit <-chan time.Time
	if blocking {
		t := time.NewTimer(d)
		defer t.Stop()
		limit = t.C
	}
	for {
		lw.mu.Lock()
		st, cur, changed := lw.st, lw.index, lw.changed
		lw.mu.Unlock()
		if st != nil && (!blocking || cur != index) {
			a.writeStatus(w, name, cur, st)
			return
		}
		select {
		case <-changed:
		case <-first.C:
			if st == nil {
				re := a.c.Reach()
				writeError(w, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("no quorum answered about %q within %v: the agent is connected to %d of %d servers, needs %d", name, firstStatusWait, re.Connected, re.N, re.Quorum)})
				return
			}
		case <-limit:
			a.writeStatus(w, name, cur, st)
			return
		case <-r.Context().Done():
			return
		case <-a.stopping:
			writeError(w, &Error{Code: CodeAgentStopping, Message: "the agent is shutting down"})
			return
		}
	}
}

// firstStatusWait bounds the wait for a lock's first state.
const firstStatusWait = 3 * time.Second

func (a *Agent) writeStatus(w http.ResponseWriter, name string, index uint64, st *bq.Status) {
	w.Header().Set("X-Bq-Index", strconv.FormatUint(index, 10))
	_ = writeJSON(w, http.StatusOK, statusView(name, index, st))
}
