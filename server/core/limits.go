package core

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/bq-lock/bq/activeset"
	"github.com/bq-lock/bq/detector"
	"github.com/bq-lock/bq/wire"
)

// Limits (docs/protocol.md change 25): every limit counts what is live now
// or a rate, and a request over one is refused at once with a LimitError,
// which names the limit (its settings key), its value and, for a rate, when
// a retry may pass. Rates are token buckets (golang.org/x/time/rate, driven
// by the times Step and Tick are given, so the core stays a pure state
// machine).

// LimitError is a request refused by a limit.
type LimitError struct {
	Name  string // the server setting's key
	Value uint64
	// RetryAfter is, for a rate, how long until a retry may pass; zero for
	// a live count (the client must use less first).
	RetryAfter time.Duration
	What       string // what was over the limit, in words
	// Shown is Value as the settings file writes it, if not a number
	// (a duration: Value is then in milliseconds).
	Shown string
}

func (e *LimitError) Error() string {
	shown := e.Shown
	if shown == "" {
		shown = fmt.Sprint(e.Value)
	}
	msg := fmt.Sprintf("limit %s (%s) reached: %s", e.Name, shown, e.What)
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf("; retry after %v", e.RetryAfter.Round(time.Millisecond))
	}
	return msg
}

// wireLimit is the wire form of err's limit, if err is a LimitError.
func wireLimit(err error) *wire.Limit {
	var le *LimitError
	if !errors.As(err, &le) {
		return nil
	}
	return &wire.Limit{Name: le.Name, Value: le.Value, RetryAfterMillis: uint64((le.RetryAfter + time.Millisecond - 1) / time.Millisecond)}
}

// clientRates are one identity's token buckets at this server.
type clientRates struct {
	requests *rate.Limiter // every request but the lease's own
	names    *rate.Limiter // lock names the identity does not use yet
	// connected: the identity has a connection here. A bucket of an
	// identity that left is kept until it is full again, so reconnecting
	// does not refill it (sweepRates).
	connected bool
	// told: the newest epoch this identity was shown on its connection
	// (tellClient, change 43); 0 again when it leaves.
	told uint64
}

// rateSweepEvery is how often Tick drops the buckets of identities that
// left and whose buckets are full again.
const rateSweepEvery = 10 * time.Second

func (k *Core) ratesOf(c wire.ClientID) *clientRates {
	r := k.rates[c]
	if r == nil {
		nameBurst := max(k.cfg.NewLocksPerMinute/10, 10)
		r = &clientRates{
			requests: rate.NewLimiter(rate.Limit(k.cfg.ClientRate), k.cfg.ClientBurst),
			names:    rate.NewLimiter(rate.Limit(float64(k.cfg.NewLocksPerMinute)/60), nameBurst),
		}
		k.rates[c] = r
	}
	return r
}

// allowRequest takes a token of c's request bucket for m, or returns the
// limit it ran into. The lease's own messages (SessionOpen, Heartbeat,
// SessionClose) are paced by the lease and never refused here.
func (k *Core) allowRequest(now time.Time, c wire.ClientID, m *wire.Message) error {
	if m.SessionOpen != nil || m.Heartbeat != nil || m.SessionClose != nil {
		return nil
	}
	return take(now, k.ratesOf(c).requests, "client_rate", uint64(k.cfg.ClientRate),
		fmt.Sprintf("client %s sent more than %v requests a second (burst %d)", c, k.cfg.ClientRate, k.cfg.ClientBurst))
}

// take takes one token of lim at now, or says when one will be there.
func take(now time.Time, lim *rate.Limiter, name string, value uint64, what string) error {
	r := lim.ReserveN(now, 1)
	if !r.OK() {
		return &LimitError{Name: name, Value: value, What: what}
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return &LimitError{Name: name, Value: value, RetryAfter: d, What: what}
	}
	return nil
}

// lockForClient is lockFor for a client's own request: a name c does not
// use yet also takes a token of its bucket of new names — except for an
// Exit, which only ends an attempt and must never wait on a limit (the
// attempt it ends may be one whose Doorway the bucket refused).
func (k *Core) lockForClient(now time.Time, c wire.ClientID, name string, exit bool) (*activeset.Lock, error) {
	if _, ok := k.clientLocks[c][name]; !ok && !exit {
		if err := wire.CheckLockName(name); err != nil {
			return nil, err
		}
		if err := take(now, k.ratesOf(c).names, "new_locks_per_minute", uint64(k.cfg.NewLocksPerMinute),
			fmt.Sprintf("client %s took more than %d new lock names a minute", c, k.cfg.NewLocksPerMinute)); err != nil {
			return nil, err
		}
	}
	return k.lockFor(c, name)
}

// connectedRates notes that c (dis)connected.
func (k *Core) connectedRates(c wire.ClientID, connected bool) {
	if connected {
		k.ratesOf(c).connected = true
	} else if r := k.rates[c]; r != nil {
		r.connected, r.told = false, 0
	}
}

// sweepRates drops the buckets of identities with no connection whose
// buckets are full again: keeping them any longer would change nothing.
func (k *Core) sweepRates(now time.Time) {
	if now.Sub(k.ratesSweptAt) < rateSweepEvery {
		return
	}
	k.ratesSweptAt = now
	for c, r := range k.rates {
		if !r.connected && r.requests.TokensAt(now) >= float64(r.requests.Burst()) && r.names.TokensAt(now) >= float64(r.names.Burst()) {
			delete(k.rates, c)
		}
	}
}

// sessionLimit is the limit a session's refusal by the detector ran into
// (the TTL asked for, too many sessions), or nil for any other error.
func (k *Core) sessionLimit(err error, ttl time.Duration) *LimitError {
	switch {
	case errors.Is(err, detector.ErrBadTTL) && ttl < k.cfg.MinTTL:
		return &LimitError{Name: "min_ttl", Value: uint64(k.cfg.MinTTL / time.Millisecond), Shown: k.cfg.MinTTL.String(), What: fmt.Sprintf("a lease TTL of %v is below it", ttl)}
	case errors.Is(err, detector.ErrBadTTL):
		return &LimitError{Name: "max_ttl", Value: uint64(k.cfg.MaxTTL / time.Millisecond), Shown: k.cfg.MaxTTL.String(), What: fmt.Sprintf("a lease TTL of %v is above it", ttl)}
	case errors.Is(err, detector.ErrTooManySessions):
		return &LimitError{Name: "max_sessions_per_client", Value: uint64(k.cfg.MaxSessionsPerClient), What: "too many live sessions of this client"}
	case errors.Is(err, detector.ErrTooManyDeferred):
		return &LimitError{Name: "max_deferred_sessions", Value: uint64(k.cfg.MaxDeferredSessions), What: "too many sessions of this client wait for an older one to end"}
	}
	return nil
}

// knows reports whether this server holds anything of c besides a ban: a
// register value, a subscription, a lease, a vote or a certificate.
func (k *Core) knows(c wire.ClientID) bool {
	return len(k.clientLocks[c]) > 0 || k.mute.Knows(c)
}
