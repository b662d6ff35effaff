package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unicode"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/wire"
)

// acquireRequest is the body of an acquire and of a hold stream.
type acquireRequest struct {
	// Mode is "exclusive" (the default), "shared" (a reader of a
	// readers–writer lock) or "permits" (one of Permits).
	Mode    string `json:"mode"`
	Permits int    `json:"permits"`
	// Wait bounds a blocking acquire (absent: until the caller goes); Try
	// takes the lock only if nobody is ahead.
	Wait json.RawMessage `json:"wait"`
	Try  bool            `json:"try"`
	// TTL bounds the hold: at its end the hold is lost ("expired") and
	// released the loss grace later, unless released first.
	TTL json.RawMessage `json:"ttl"`
	// RequestID makes a retried acquire return the hold the first one
	// took, instead of taking a second (acquire only).
	RequestID string `json:"request_id"`
	// Ping is how often a hold stream says it still holds (stream only).
	Ping json.RawMessage `json:"ping"`
}

// acquireParams are what an acquire asks for, checked.
type acquireParams struct {
	name      string
	mode      bq.Mode
	try       bool
	wait      time.Duration // 0 with waitSet false: no bound
	waitSet   bool
	ttl       time.Duration // 0: none
	requestID string
	ping      time.Duration
}

// same reports whether a retry with p's request id asks what o asked (its
// wait may differ: a retry often waits less).
func (p acquireParams) same(o acquireParams) bool {
	return p.name == o.name && p.mode == o.mode && p.try == o.try && p.ttl == o.ttl
}

// maxRequestID bounds a request id.
const maxRequestID = 128

func (a *Agent) parseAcquire(name string, r acquireRequest) (acquireParams, *Error) {
	p := acquireParams{name: name, try: r.Try, requestID: r.RequestID, ping: a.cfg.Ping}
	if err := wire.CheckLockName(name); err != nil {
		return p, badField("name", "the lock's name: "+trimWire(err))
	}
	switch {
	case r.Mode == "permits" || r.Mode == "" && r.Permits != 0:
		if r.Permits < 2 || r.Permits > wire.MaxPermits {
			return p, badField("permits", fmt.Sprintf("permits: %d: want 2 to %d (for 1, take the lock exclusive)", r.Permits, wire.MaxPermits))
		}
		p.mode = bq.Mode{Mode: wire.ModePermits, Permits: uint32(r.Permits)}
	case r.Permits != 0:
		return p, badField("permits", fmt.Sprintf("permits is for mode \"permits\", not %q", r.Mode))
	case r.Mode == "" || r.Mode == "exclusive":
	case r.Mode == "shared":
		p.mode = bq.Mode{Mode: wire.ModeShared}
	default:
		return p, badField("mode", fmt.Sprintf("mode: %q: want \"exclusive\", \"shared\" or \"permits\"", r.Mode))
	}
	var e *Error
	if p.wait, p.waitSet, e = durationField("wait", r.Wait); e != nil {
		return p, e
	}
	if p.try && p.waitSet && p.wait > 0 {
		return p, badField("wait", "wait and try together: try does not wait; give one")
	}
	if p.ttl, _, e = durationField("ttl", r.TTL); e != nil {
		return p, e
	}
	if mh := a.c.MaxHold(); p.ttl > 0 && mh > 0 && p.ttl > mh {
		return p, badField("ttl", fmt.Sprintf("ttl: %v is longer than this identity's max-hold, %v: the servers end a hold then", p.ttl, mh))
	}
	if ping, set, e := durationField("ping", r.Ping); e != nil {
		return p, e
	} else if set {
		if ping < minPing || ping > maxPing {
			return p, badField("ping", fmt.Sprintf("ping: %v is out of [%v, %v]", ping, minPing, maxPing))
		}
		p.ping = ping
	}
	if len(p.requestID) > maxRequestID {
		return p, badField("request_id", fmt.Sprintf("request_id: %d bytes; at most %d", len(p.requestID), maxRequestID))
	}
	for _, c := range p.requestID {
		if !unicode.IsPrint(c) {
			return p, badField("request_id", "request_id: only printable characters")
		}
	}
	return p, nil
}

// The bounds of a stream's ping interval.
const (
	minPing = 100 * time.Millisecond
	maxPing = time.Minute
)

func trimWire(err error) string {
	s := err.Error()
	if len(s) > 6 && s[:6] == "wire: " {
		return s[6:]
	}
	return s
}

// take acquires p's lock with the agent's client within ctx.
func (a *Agent) take(ctx context.Context, p acquireParams) (*bq.Holding, error) {
	if p.waitSet && !p.try {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.wait)
		defer cancel()
	}
	switch p.mode.Mode {
	case wire.ModePermits:
		s := a.c.Semaphore(p.name, int(p.mode.Permits))
		if p.try {
			return s.TryAcquire(ctx)
		}
		return s.Acquire(ctx)
	case wire.ModeShared:
		rw := a.c.RWMutex(p.name)
		if p.try {
			return rw.TryRLock(ctx)
		}
		return rw.RLock(ctx)
	}
	m := a.c.Mutex(p.name)
	if p.try {
		return m.TryLock(ctx)
	}
	return m.Lock(ctx)
}

// newHold makes the hold of holding hd (or leadership l), enters it in the
// table (in the room reserve took) and starts keeping it.
func (a *Agent) newHold(p acquireParams, hd *bq.Holding, l *bq.Leadership, stream bool) *hold {
	now := time.Now()
	h := &hold{
		id: newLockID(), name: p.name, mode: p.mode, requestID: p.requestID, started: now,
		l: l, stream: stream, state: stateHeld,
		release: make(chan struct{}), ended: make(chan struct{}), gone: make(chan struct{}),
	}
	if h.g = grant(lockGrant{hd}); l != nil {
		h.g = leadGrant{l}
	}
	if p.ttl > 0 {
		h.expires = now.Add(p.ttl)
	}
	a.holds.add(h)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.run(h)
	}()
	return h
}

// acquire takes p's lock for a caller whose request is ctx: without a
// request id, the attempt is the request's (it is abandoned if the caller
// goes); with one, see acquireOnce.
func (a *Agent) acquire(ctx context.Context, p acquireParams) (*hold, *Error) {
	if p.requestID != "" {
		return a.acquireOnce(ctx, p)
	}
	if e := a.holds.reserve(); e != nil {
		return nil, e
	}
	ctx, cancel := a.bound(ctx)
	defer cancel()
	hd, err := a.take(ctx, p)
	if err != nil {
		a.holds.unreserve()
		return nil, fromClient(err)
	}
	return a.newHold(p, hd, nil, false), nil
}

// bound ends ctx also when the agent stops.
func (a *Agent) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(a.stopCtx, func() { cancel(errStopping) })
	return ctx, func() { stop(); cancel(nil) }
}
