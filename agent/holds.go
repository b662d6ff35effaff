package agent

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"sync"
	"time"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/wire"
)

// A hold's states, as the API names them.
const (
	stateHeld     = "held"
	stateLost     = "lost"
	stateReleased = "released"
)

// Why a hold was lost, as the API names it (HoldView.Reason).
const (
	reasonLeaseLost     = "lease_lost"     // the agent could not renew its session in time (cut off from the cluster)
	reasonMaxHold       = "max_hold"       // held for the identity's max-hold
	reasonRevoked       = "revoked"        // the identity is no longer permitted (revoked, expired, banned)
	reasonExpired       = "expired"        // the hold's own ttl ran out
	reasonAgentStopping = "agent_stopping" // the agent is shutting down
)

// HoldView is a hold as the API shows it.
type HoldView struct {
	LockID string `json:"lock_id"`
	// Kind is "lock", or "leadership" for an election's lead.
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Mode    string `json:"mode"`
	Permits int    `json:"permits,omitempty"`
	// Token is the fencing token as "N.T"; TokenInt as one decimal integer
	// (up to 39 digits: a string, as JSON numbers lose digits past 2^53).
	// Both grow from each holder of the lock to the next.
	Token     string     `json:"token"`
	TokenInt  string     `json:"token_int"`
	Started   time.Time  `json:"started"`
	Expires   *time.Time `json:"expires,omitempty"`
	RequestID string     `json:"request_id,omitempty"`
	State     string     `json:"state"`
	// Valid is true only while the hold is guaranteed, and ValidUntil is
	// until when: both come from the lease's own instant, not from a timer,
	// so Valid is never true after the hold could have been lost.
	Valid      bool       `json:"valid"`
	ValidUntil *time.Time `json:"valid_until,omitempty"`
	Reason     string     `json:"reason,omitempty"`
	Message    string     `json:"message,omitempty"`
	// Value is a leadership's proclaimed value.
	Value *string `json:"value,omitempty"`
}

// hold is one holding of the agent's client, taken for a caller.
type hold struct {
	id        string
	name      string
	mode      bq.Mode
	requestID string
	started   time.Time
	expires   time.Time // zero: no ttl
	g         grant
	l         *bq.Leadership // set for a leadership (g is its leadGrant)
	stream    bool           // it ends with the request that took it
	// release is closed when the caller asks to release (DELETE, resign, or
	// its stream closed); ended when the hold is no longer held; gone when
	// its Unlock (or Resign) has returned.
	release     chan struct{}
	releaseOnce sync.Once
	ended       chan struct{}
	gone        chan struct{}

	mu sync.Mutex
	// INVARIANT: state moves held → lost or held → released, once;
	// ended is closed exactly when it leaves held.
	state   string
	reason  string
	message string
	endedAt time.Time
}

func (h *hold) kind() string {
	if h.l != nil {
		return "leadership"
	}
	return "lock"
}

// grant is what a hold holds: a lock's holding, or an election's lead.
type grant interface {
	Token() bq.Token
	Lost() <-chan struct{}
	Err() error
	// ValidUntil is until when it is guaranteed; zero once it may be lost.
	ValidUntil() time.Time
	Release(ctx context.Context) error
}

type lockGrant struct{ *bq.Holding }

func (g lockGrant) Release(ctx context.Context) error { return g.Unlock(ctx) }

type leadGrant struct{ *bq.Leadership }

func (g leadGrant) Token() bq.Token                   { return g.Term() }
func (g leadGrant) Release(ctx context.Context) error { return g.Resign(ctx) }

// askRelease is the caller's release: DELETE, resign, or its stream ended.
func (h *hold) askRelease() { h.releaseOnce.Do(func() { close(h.release) }) }

// finish moves a held hold to state, once.
func (h *hold) finish(state, reason, message string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != stateHeld {
		return
	}
	h.state, h.reason, h.message, h.endedAt = state, reason, message, now
	close(h.ended)
}

// view is the hold as the API shows it at now.
func (h *hold) view(now time.Time) *HoldView {
	t := h.g.Token()
	v := &HoldView{
		LockID: h.id, Kind: h.kind(), Name: h.name, Mode: modeName(h.mode),
		Token: t.String(), TokenInt: t.Integer(), Started: h.started.UTC(), RequestID: h.requestID,
	}
	if h.mode.Mode == wire.ModePermits {
		v.Permits = int(h.mode.Permits)
	}
	if !h.expires.IsZero() {
		e := h.expires.UTC()
		v.Expires = &e
	}
	if h.l != nil {
		val := h.l.Value()
		v.Value = &val
	}
	h.mu.Lock()
	v.State, v.Reason, v.Message = h.state, h.reason, h.message
	h.mu.Unlock()
	if err := h.g.Err(); v.State == stateHeld && err != nil {
		// Lost, and run has not noted it yet: say so now.
		v.State, v.Reason, v.Message = stateLost, lostReason(err), err.Error()
	}
	if v.State == stateHeld {
		// The guarantee's own instant decides, read after the state: a
		// hold lost meanwhile has a zero instant.
		if until := h.g.ValidUntil(); !until.IsZero() && (h.expires.IsZero() || now.Before(h.expires)) {
			if !h.expires.IsZero() && h.expires.Before(until) {
				until = h.expires
			}
			u := until.UTC()
			v.Valid, v.ValidUntil = true, &u
		}
	}
	return v
}

func modeName(m bq.Mode) string {
	switch m.Mode {
	case wire.ModeShared:
		return "shared"
	case wire.ModePermits:
		return "permits"
	}
	return "exclusive"
}

// lostReason names why a holding was lost, from its error.
func lostReason(err error) string {
	switch {
	case errors.Is(err, bq.ErrMaxHold):
		return reasonMaxHold
	case errors.Is(err, bq.ErrNotPermitted), errors.Is(err, bq.ErrRefused):
		return reasonRevoked
	}
	return reasonLeaseLost
}

// newLockID is an unguessable name for a hold: 128 random bits.
func newLockID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "h_" + base64.RawURLEncoding.EncodeToString(b[:])
}

// holdTable is the agent's holds by lock_id, the live ones and, for a
// while, the ended ones (so that a caller asking about a hold that ended
// hears how, not "not found").
// INVARIANT: live counts the holds in byID whose state is held, plus the
// acquires in progress (reserved); live never exceeds max.
type holdTable struct {
	mu     sync.Mutex
	byID   map[string]*hold
	ended  []*hold // in the order they ended, for forgetting
	live   int
	max    int
	retain time.Duration
}

func newHoldTable(max int, retain time.Duration) *holdTable {
	return &holdTable{byID: make(map[string]*hold), max: max, retain: retain}
}

// reserve takes room for one more hold, or says the agent is full.
func (t *holdTable) reserve() *Error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.live >= t.max {
		return &Error{Code: CodeTooMany, Message: "the agent has as many holds and acquires in progress as it takes (--max-holds): release one first"}
	}
	t.live++
	return nil
}

// unreserve gives back room that reserve took and no hold used.
func (t *holdTable) unreserve() {
	t.mu.Lock()
	t.live--
	t.mu.Unlock()
}

// add enters h, in the room a reserve took.
func (t *holdTable) add(h *hold) {
	t.mu.Lock()
	t.byID[h.id] = h
	t.mu.Unlock()
}

// ended notes that h ended: its room is free, and it is forgotten after
// retain, or sooner once more than max ended holds are remembered.
func (t *holdTable) noteEnded(h *hold, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.live--
	t.ended = append(t.ended, h)
	t.forget(now)
}

// forget drops ended holds older than retain, and the oldest beyond max.
func (t *holdTable) forget(now time.Time) {
	drop := 0
	for drop < len(t.ended) {
		h := t.ended[drop]
		h.mu.Lock()
		old := now.Sub(h.endedAt) >= t.retain
		h.mu.Unlock()
		if !old && len(t.ended)-drop <= t.max {
			break
		}
		delete(t.byID, h.id)
		drop++
	}
	t.ended = append(t.ended[:0], t.ended[drop:]...)
}

func (t *holdTable) get(id string, now time.Time) *hold {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forget(now)
	return t.byID[id]
}

// holds returns every live hold.
func (t *holdTable) all() []*hold {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*hold, 0, len(t.byID))
	for _, h := range t.byID {
		out = append(out, h)
	}
	return out
}

func (t *holdTable) counts() (live int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live
}

// run keeps h until it ends and its Unlock has gone out: the caller's
// release unlocks at once; a loss, its ttl, or the agent stopping ends it
// first and unlocks after releaseLostAfter (the caller's time to stop its
// work: the client's loss grace and the servers' margin), or sooner if the
// caller releases.
func (a *Agent) run(h *hold) {
	defer close(h.gone)
	var expire <-chan time.Time
	if !h.expires.IsZero() {
		t := time.NewTimer(time.Until(h.expires))
		defer t.Stop()
		expire = t.C
	}
	waitRelease := func() {
		t := time.NewTimer(a.cfg.ReleaseLostAfter)
		defer t.Stop()
		select {
		case <-h.release:
		case <-t.C:
		}
	}
	select {
	case <-h.release:
		h.finish(stateReleased, "", "", time.Now())
	case <-h.g.Lost():
		err := h.g.Err()
		h.finish(stateLost, lostReason(err), err.Error(), time.Now())
		waitRelease()
	case <-expire:
		h.finish(stateLost, reasonExpired, "the hold's ttl ran out", time.Now())
		waitRelease()
	case <-a.stopping:
		h.finish(stateLost, reasonAgentStopping, "the agent is shutting down", time.Now())
		waitRelease()
	}
	a.unlock(h)
	a.holds.noteEnded(h, time.Now())
}

// unlock releases h at the servers, within unlockBudget.
func (a *Agent) unlock(h *hold) {
	ctx, cancel := context.WithTimeout(context.Background(), unlockBudget)
	defer cancel()
	if err := h.g.Release(ctx); err != nil && !errors.Is(err, bq.ErrLockLost) && !errors.Is(err, bq.ErrClosed) {
		a.log.Warn("releasing a hold", "lock", h.name, "lock_id", h.id, "err", err)
	}
}

// unlockBudget bounds one Unlock: past it the Exit is still on its way, and
// the client keeps the name until it completes.
const unlockBudget = 10 * time.Second
