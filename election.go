package bq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/wire"
)

// Leader election (docs/election.md, docs/protocol.md §11). An election is
// a lock: a candidate campaigns by taking it, the leader is its holder, and
// the term is the holding's fencing token. The leader's value is a
// proclamation it signs, tied to its term; observers believe a leader, a
// term and a value only when f+1 of q servers report them.

// ErrNoLeader: the election has no leader at the moment (nobody holds its
// lock, a handoff is under way, or the holder has not proclaimed a value).
var ErrNoLeader = errors.New("bq: no leader")

// observeEvery is how often Observe reads the servers when nothing was
// pushed (a fallback: a faulty server may push nothing, a correct one's
// push may be lost with its connection).
var observeEvery = time.Second

// leaderGrace is how long a read of the leader waits, once q servers
// answered, for the others: more answers make f+1 matching ones likelier.
const leaderGrace = 50 * time.Millisecond

// Election is one election by name. It is cheap: make one per use.
type Election struct {
	c    *Client
	name string
}

// Election returns the election name (a lock name: the same rules apply).
func (c *Client) Election(name string) *Election { return &Election{c: c, name: name} }

// Name is the election's name.
func (e *Election) Name() string { return e.name }

// Leader is an election's leader as observers see it.
type Leader struct {
	Client wire.ClientID
	// Term is the leader's fencing token: terms only grow, and compare like
	// lock tokens (Token.Less, Token.String, Token.Integer).
	Term Token
	// Rev counts the leader's proclamations in this term: 1 for Campaign's
	// value, one more for each Proclaim.
	Rev   uint64
	Value string
}

// Leadership is this client's lead of an election, from Campaign until it
// resigns or loses the lead.
type Leadership struct {
	e     *Election
	h     *Holding
	mu    sync.Mutex // serialises Proclaim; guards rev
	rev   uint64
	vmu   sync.Mutex // guards value (Value does not wait for a Proclaim)
	value string
	ended chan struct{}
	once  sync.Once
}

// Term is the leadership's term: the fencing token of its holding.
func (l *Leadership) Term() Token { return l.h.Token() }

// Lost is closed the moment the lead is lost (the lease guarantee failed,
// or the max-hold came): stop acting as leader at once. Err says why.
func (l *Leadership) Lost() <-chan struct{} { return l.h.Lost() }

// Err is nil while the lead lasts and, once Lost is closed, why it was lost.
func (l *Leadership) Err() error { return l.h.Err() }

// ValidUntil is until when the lead is guaranteed (Holding.ValidUntil):
// zero once it is lost, resigned, or its guarantee lapsed.
func (l *Leadership) ValidUntil() time.Time {
	if l.over() {
		return time.Time{}
	}
	return l.h.ValidUntil()
}

// Value is the value last proclaimed by a quorum.
func (l *Leadership) Value() string {
	l.vmu.Lock()
	defer l.vmu.Unlock()
	return l.value
}

// Campaign waits until this client leads the election, proclaims value and
// returns once q servers keep it. Candidates lead in the order they
// campaigned (first come, first served).
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	if len(value) > wire.MaxProclaimedValue {
		return nil, fmt.Errorf("bq: a leader's value of %d bytes (the limit is %d)", len(value), wire.MaxProclaimedValue)
	}
	h, err := e.c.Mutex(e.name).Lock(ctx)
	if err != nil {
		return nil, err
	}
	l := &Leadership{e: e, h: h, ended: make(chan struct{})}
	// A cluster that lets this client lead but does not keep its value
	// (servers older than protocol 1.2 ignore Proclaim) must not keep the
	// lead from everyone else: the first value has a bounded wait.
	pctx, cancel := context.WithTimeout(ctx, max(2*e.c.ttl, 5*time.Second))
	defer cancel()
	if err := l.Proclaim(pctx, value); err != nil {
		if ctx.Err() == nil && pctx.Err() != nil {
			err = fmt.Errorf("%w (servers older than protocol 1.2 do not keep a leader's value)", err)
		}
		rctx, cancel := context.WithTimeout(context.Background(), quitBudget)
		defer cancel()
		_ = l.Resign(rctx)
		return nil, err
	}
	return l, nil
}

// quitBudget bounds the Exit of a Campaign that could not proclaim.
const quitBudget = time.Second

// Proclaim changes the leader's value without giving up the lead: it returns
// once q servers keep the new value. Observers see it from then on.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	if len(value) > wire.MaxProclaimedValue {
		return fmt.Errorf("bq: a leader's value of %d bytes (the limit is %d)", len(value), wire.MaxProclaimedValue)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.h.Err(); err != nil {
		return err
	}
	select {
	case <-l.ended:
		return ErrNotHeld
	default:
	}
	c := l.e.c
	l.rev++
	sp, err := wire.SignProclamation(c.key, c.cluster.ID(), &wire.ProclamationBody{Lock: l.e.name, Client: c.ID(),
		Session: l.h.session, Attempt: l.h.attempt, N: l.h.token.N, Rev: l.rev, Value: []byte(value)})
	if err != nil {
		return fmt.Errorf("bq: %w", err)
	}
	c.mu.Lock()
	c.proclaimed[l.e.name] = &proclaimedValue{signed: sp, lead: l}
	c.mu.Unlock()
	c.mu.Lock()
	v := c.view()
	c.mu.Unlock()
	if err := c.proclaim(ctx, l, v.ids, sp, v.q, true); err != nil {
		return err
	}
	l.vmu.Lock()
	l.value = value
	l.vmu.Unlock()
	return nil
}

// Resign gives the lead up: the next candidate leads once the servers hear
// of it.
func (l *Leadership) Resign(ctx context.Context) error {
	l.end()
	return l.h.Unlock(ctx)
}

func (l *Leadership) end() {
	l.once.Do(func() {
		close(l.ended)
		c := l.e.c
		c.mu.Lock()
		if p := c.proclaimed[l.e.name]; p != nil && p.lead == l {
			delete(c.proclaimed, l.e.name)
		}
		c.mu.Unlock()
	})
}

// over reports whether the lead ended (resigned or lost).
func (l *Leadership) over() bool {
	select {
	case <-l.ended:
		return true
	case <-l.h.Lost():
		return true
	default:
		return false
	}
}

// Run campaigns with value and, once leading, runs fn with a context that is
// cancelled the moment the lead is lost — before any server could let
// another candidate lead — or ctx ends. When fn returns, Run resigns. It
// returns fn's error, or the reason the lead was lost (an ErrLockLost).
func (e *Election) Run(ctx context.Context, value string, fn func(ctx context.Context, l *Leadership) error) error {
	l, err := e.Campaign(ctx, value)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	go func() {
		select {
		case <-l.Lost():
			cancel(l.Err())
		case <-stop:
		}
	}()
	ferr := fn(runCtx, l)
	close(stop)
	cancel(nil)
	if lerr := l.Err(); lerr != nil {
		l.end()
		return errors.Join(lerr, ferr)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	return errors.Join(ferr, l.Resign(rctx))
}

// Leader reads the election's leader from the servers: the holder of its
// lock with its latest proclaimed value, as f+1 of at least q servers report
// them. With no leader at the moment it returns an ErrNoLeader that says why.
func (e *Election) Leader(ctx context.Context) (*Leader, error) {
	if err := wire.CheckLockName(e.name); err != nil {
		return nil, fmt.Errorf("bq: %w", err)
	}
	if err := e.c.mayUse(e.name); err != nil {
		return nil, err
	}
	began := time.Now()
	replies, v, err := e.c.statusReplies(ctx, e.name, leaderGrace)
	if err != nil {
		return nil, err
	}
	if len(replies) < v.q {
		what := fmt.Sprintf("a quorum of servers (%d of %d answered, need %d)", len(replies), len(v.ids), v.q)
		if ctx.Err() != nil {
			return nil, gaveUp(ctx, time.Since(began), what, true)
		}
		return nil, &Error{msg: "bq: no leader known: " + what, kinds: []error{ErrUnavailable}, what: what}
	}
	rs := make([]*wire.StatusReply, 0, len(replies))
	for _, r := range replies {
		rs = append(rs, r)
	}
	l, no := bakery.DecideLeader(e.c.cluster.ID(), v.f, e.name, rs)
	if no != nil {
		return nil, &Error{msg: fmt.Sprintf("bq: election %s: %s", e.name, no.Reason), kinds: []error{ErrNoLeader}}
	}
	return &Leader{Client: l.Client, Term: l.Term, Rev: l.Rev, Value: string(l.Value)}, nil
}

// Observe sends each leader (or new value of a leader) it sees, in term
// order: a read older than the last one sent (a lagging server's) is dropped,
// so terms and revisions only grow. It watches the election's lock at every
// server (docs/protocol.md change 32): each push — a member's statement
// changed, or the holder proclaimed — makes it read the leader at once, and
// it decides, as Leader does, only on what f+1 of q replies hold; it also
// reads once a second when nothing was pushed. A Client with a session
// watches through an observer connection of its identity, dialed on first
// use. The channel is closed when ctx ends or the client closes, and at
// once for a name the identity may not use (Client.MayUse says why).
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader)
	go func() {
		defer close(ch)
		if e.c.mayUse(e.name) != nil {
			return // every server would refuse it: MayUse says why
		}
		var last *Leader
		e.c.watchEach(ctx, e.name, func(o *Client) bool {
			l, err := o.Election(e.name).Leader(ctx)
			if err != nil || !newer(l, last) {
				return true
			}
			select {
			case ch <- *l:
				last = l
				return true
			case <-ctx.Done():
			case <-e.c.closed:
			}
			return false
		})
	}()
	return ch
}

// newer reports whether l comes after last: a higher term, or the same term
// with a higher revision.
func newer(l, last *Leader) bool {
	if last == nil {
		return true
	}
	if l.Term == last.Term {
		return l.Rev > last.Rev
	}
	return last.Term.Less(l.Term)
}

// ---------------------------------------------------------------------------
// Sending proclamations.

const proclaimReqBase = uint64(1) << 61

// proclaimedValue is a lead's latest proclamation.
type proclaimedValue struct {
	signed wire.SignedProclamation
	lead   *Leadership
}

// proclaimWait is one proclamation waiting for acknowledgements.
type proclaimWait struct{ ch chan proclaimReply }

type proclaimReply struct {
	server wire.ServerID
	err    *wire.Error // nil: acknowledged
}

// proclaimAnswer routes a server's answer to a Proclaim and reports whether
// m was one. c.mu must be held.
func (c *Client) proclaimAnswer(s wire.ServerID, m *wire.Message) bool {
	var req uint64
	switch {
	case m.Ack != nil:
		req = m.Ack.Req
	case m.Error != nil:
		req = m.Error.Req
	default:
		return false
	}
	if req < proclaimReqBase || req >= statusReqBase {
		return false
	}
	if w := c.proclaims[req]; w != nil {
		select {
		case w.ch <- proclaimReply{server: s, err: m.Error}:
		default: // a server that repeats itself fills only its share
		}
	}
	return true
}

// reproclaim sends the latest proclamation of every lead this client holds
// to server s, which just (re)connected: a restarted server keeps none
// (§11). c.mu must be held.
func (c *Client) reproclaim(s wire.ServerID) {
	for name, p := range c.proclaimed {
		if p.lead.over() {
			delete(c.proclaimed, name)
			continue
		}
		go func(p *proclaimedValue) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = c.proclaim(ctx, p.lead, []wire.ServerID{s}, p.signed, 1, false)
		}(p)
	}
}

// proclaim sends sp to servers until need of them acknowledge it, the lead
// ends, ctx ends, or so many refuse that need cannot be reached. A server
// that answers "resend" has not seen the Held yet: it gets sp again 25 ms
// later; one that does not answer, every 250 ms. With follow, servers and
// need are the client's epoch's members and q, and follow it across a
// change (docs/protocol.md change 43): a member that answers epoch-moved
// sealed the client's epoch, and gets sp again once it serves the next (if
// it is a member of it); the new members get it too.
func (c *Client) proclaim(ctx context.Context, l *Leadership, servers []wire.ServerID, sp wire.SignedProclamation, need int, follow bool) error {
	began := time.Now()
	c.mu.Lock()
	c.nextProclaim++
	req := proclaimReqBase + c.nextProclaim
	w := &proclaimWait{ch: make(chan proclaimReply, 4*len(servers))}
	c.proclaims[req] = w
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.proclaims, req)
		c.mu.Unlock()
	}()
	send := func(s wire.ServerID) {
		_ = c.tr.Send(wire.ServerPeer(s), &wire.Message{Proclaim: &wire.Proclaim{Req: req, Proclamation: sp}})
	}
	for _, s := range servers {
		send(s)
	}
	acked := make(map[wire.ServerID]bool)
	refused := make(map[wire.ServerID]*wire.Error)
	resend := make(map[wire.ServerID]bool)
	// ackedOf counts the acks of the servers that count now.
	ackedOf := func() int {
		n := 0
		for _, s := range servers {
			if acked[s] {
				n++
			}
		}
		return n
	}
	soon := time.NewTicker(25 * time.Millisecond)
	defer soon.Stop()
	lastAll := time.Now()
	for {
		select {
		case r := <-w.ch:
			if acked[r.server] || refused[r.server] != nil {
				continue
			}
			switch {
			case r.err == nil:
				acked[r.server] = true
				if ackedOf() >= need {
					return nil
				}
			case r.err.Code == wire.ErrCodeResend, follow && r.err.Code == wire.ErrCodeEpochMoved:
				resend[r.server] = true
			default:
				refused[r.server] = r.err
				if len(servers)-len(refused) < need {
					return proclaimRefused(c, l.e.name, refused, len(servers), need)
				}
			}
		case <-soon.C:
			all := time.Since(lastAll) >= 250*time.Millisecond
			if all {
				lastAll = time.Now()
			}
			if follow {
				c.mu.Lock()
				v := c.view()
				c.mu.Unlock()
				if !slices.Equal(v.ids, servers) {
					servers, need, all = v.ids, v.q, true // the client moved: its new epoch's members count
					if ackedOf() >= need {
						return nil
					}
				}
			}
			for _, s := range servers {
				if !acked[s] && refused[s] == nil && (resend[s] || all) {
					delete(resend, s)
					send(s)
				}
			}
		case <-l.h.Lost():
			return l.h.Err()
		case <-l.ended:
			return ErrNotHeld
		case <-ctx.Done():
			return gaveUp(ctx, time.Since(began), fmt.Sprintf("the servers to keep the value of %s (%d of %d kept it, need %d)", l.e.name, len(acked), len(servers), need), true)
		case <-c.closed:
			return ErrClosed
		}
	}
}

// proclaimRefused is the error of a proclamation too many servers refused:
// worded as every refusal of the servers is (refusalError).
func proclaimRefused(c *Client, name string, refused map[wire.ServerID]*wire.Error, n, need int) error {
	r := &bakery.Refusal{Kind: bakery.ErrRefused, What: "the value", Lock: name, N: n, Q: need, By: make(map[wire.ServerID]string, len(refused))}
	for s, e := range refused {
		if e.Code == wire.ErrCodeForbidden || e.Code == wire.ErrCodeNotAllowed {
			r.Kind = bakery.ErrNotPermitted
		}
		r.By[s] = bakery.ClientNamed(c.ID(), e.Detail)
	}
	return refusalError(r)
}
