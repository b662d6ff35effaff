package bq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/wire"
)

// Token is a fencing token: every holding of a lock gets one, and they grow
// from each holder to the next (docs/protocol.md §7).
type Token = bakery.Token

// Mutex is one lock name of a cluster, seen from one client.
type Mutex struct {
	c    *Client
	name string
	mode Mode // what its Lock asks for: exclusive, but for RWMutex's readers and Semaphore
}

// Mutex returns the lock called name. Names are 1..256 bytes of UTF-8.
func (c *Client) Mutex(name string) *Mutex { return &Mutex{c: c, name: name} }

// Name is the lock's name.
func (m *Mutex) Name() string { return m.name }

// Holding is one holding of a lock.
type Holding struct {
	m       *Mutex
	token   Token
	session uint64
	attempt uint64
	turn    *turn // the turn at the name this holding ends
	lost    chan struct{}
	once    sync.Once
	// lostErr says why the holding was lost; written once, before lost
	// is closed.
	lostErr error
}

// turn is one goroutine's turn at a lock name: it takes the slot's sem when
// it begins and gives it back exactly once when it ends (failure, Unlock,
// loss), whoever notices first.
type turn struct {
	sem  chan struct{}
	once sync.Once
}

func (t *turn) end() { t.once.Do(func() { <-t.sem }) }

// Token is the holding's fencing token.
func (h *Holding) Token() Token { return h.token }

// Lost is closed the moment the lease guarantee fails, or the holding
// reaches its max-hold: stop using the resource at once. It stays open
// until then (also after Unlock). Err says which.
func (h *Holding) Lost() <-chan struct{} { return h.lost }

// Err is nil while the holding lasts and, once Lost is closed, why it was
// lost: an ErrLockLost, and an ErrMaxHold too when it reached its max-hold,
// or an ErrNotPermitted too when the cluster no longer admits the identity
// (revoked, its certificate expired).
func (h *Holding) Err() error {
	select {
	case <-h.lost:
		return h.lostErr
	default:
		return nil
	}
}

// ValidUntil is until when the holding is guaranteed: its session's lease
// guarantee (less the loss grace) or, sooner, the instant its max-hold
// gives it up. It is zero once the holding is lost, released, or its
// guarantee lapsed: compare it with the clock to ask whether the holding
// still stands (a "yes" from a timer alone could come after a loss). The
// instant moves on with every renewal of the lease.
func (h *Holding) ValidUntil() time.Time {
	c := h.m.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.slots[h.m.name]; h.Err() != nil || s == nil || s.holding != h {
		return time.Time{}
	}
	return c.bk.HeldUntil(time.Now(), h.m.name)
}

func (h *Holding) lose(err error) {
	h.once.Do(func() {
		h.lostErr = err
		close(h.lost)
	})
}

// Name is the lock's name.
func (h *Holding) Name() string { return h.m.name }

// Mode is what the holding is: exclusive, shared (RWMutex.RLock), or one of
// k permits (Semaphore).
func (h *Holding) Mode() Mode { return h.m.mode }

// Unlock releases the holding (EXIT) and returns once q servers applied it.
func (h *Holding) Unlock(ctx context.Context) error { return h.m.unlock(ctx, h) }

// Lock blocks until the lock is held (first come, first served) or ctx ends.
// On cancellation the attempt is abandoned and its Exit sent.
func (m *Mutex) Lock(ctx context.Context) (*Holding, error) { return m.lock(ctx, false) }

// TryLock takes the lock only if nobody is ahead; otherwise it cleans up its
// attempt and returns ErrBusy. Another goroutine of this client holding (or
// locking) the same name counts as ahead: TryLock does not wait for it.
func (m *Mutex) TryLock(ctx context.Context) (*Holding, error) { return m.lock(ctx, true) }

func (m *Mutex) lock(ctx context.Context, try bool) (*Holding, error) {
	c := m.c
	start := time.Now()
	if err := wire.CheckLockName(m.name); err != nil {
		return nil, fmt.Errorf("bq: %w", err)
	}
	if c.observe {
		return nil, errObserver
	}
	if err := c.mayUse(m.name); err != nil {
		return nil, err
	}
	s := c.slot(m)
	if c.isClosing() {
		return nil, ErrClosed
	}
	if try {
		select {
		case s.sem <- struct{}{}:
		default:
			return nil, ErrBusy // this client holds or wants the name already
		}
	} else {
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, gaveUp(ctx, time.Since(start), fmt.Sprintf("%q: another goroutine of this client holds or wants it", m.name), false)
		case <-c.closed:
			return nil, ErrClosed
		}
	}
	t := &turn{sem: s.sem}
	// begin starts an attempt within this turn; a waiting attempt whose
	// session lost its lease guarantee is begun again in a new session.
	begin := func() (chan slotEvent, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.isClosing() { // Close has abandoned every attempt it knew of already
			return nil, ErrClosed
		}
		if err := c.serversKnow(m.mode); err != nil {
			return nil, err
		}
		eff, err := c.bk.LockAs(time.Now(), m.name, m.mode, try)
		if err != nil {
			return nil, mapBakeryErr(err)
		}
		// The attempt's events come on its own channel: once the turn ends, a
		// later attempt's goroutine may replace s.events.
		events := make(chan slotEvent, 8)
		s.events, s.turn, s.mutex = events, t, m
		c.apply(eff)
		return events, nil
	}
	events, err := begin()
	if err != nil {
		t.end()
		return nil, err
	}

	for {
		select {
		case ev := <-events:
			switch ev.Kind {
			case bakery.Acquired:
				return ev.holding, nil
			case bakery.Failed, bakery.Released:
				if !try && errors.Is(ev.Err, bakery.ErrLeaseLost) && ctx.Err() == nil {
					// Nothing was held: wait on, in a new session (the old
					// one's place in the queue is gone with it).
					c.log.Info("session lost while waiting; trying again in a new session", "lock", m.name)
					if events, err = begin(); err == nil {
						continue
					}
					t.end()
					return nil, err
				}
				t.end()
				if ev.Err == nil {
					return nil, ErrNotHeld
				}
				if errors.Is(ev.Err, bakery.ErrAbandoned) {
					return nil, ErrClosed // only Close abandons an attempt it does not wait for itself
				}
				if errors.Is(ev.Err, bakery.ErrBusy) && len(ev.Ahead) > 0 {
					c.mu.Lock()
					v := c.view()
					c.mu.Unlock()
					what, _ := waitWords(m.mode, bakery.Wait{Phase: "listen", Answered: v.q, Need: v.q, Ahead: ev.Ahead}, len(v.ids))
					return nil, &Error{msg: fmt.Sprintf("bq: lock %q is busy: %s", m.name, what), kinds: []error{ErrBusy}}
				}
				return nil, mapBakeryErr(ev.Err)
			}
		case <-ctx.Done():
			c.mu.Lock()
			what, servers := describeWait(m.name, m.mode, c.bk.Waiting(m.name), len(c.view().ids))
			c.mu.Unlock()
			m.abandon(events, t)
			return nil, gaveUp(ctx, time.Since(start), what, servers)
		case <-c.closed:
			return nil, ErrClosed
		}
	}
}

// Waiting says what this client's Lock (or TryLock, Acquire, RLock) of
// the lock called name waits for now, in the words a timeout would use:
// `held as 2 permits by 9f3c5e0a12b4c6d8 (token 12.4e1a9b0c2d3e4f56)`, or
// how many servers answered. clash is set when it waits for a member whose
// mode excludes the one asked although both share among their own kind
// (another semaphore count, readers against a semaphore's holders, a plain
// lock against a semaphore); what then says so. Such a wait is often a
// mistake in a count, and lasts for as long as they hold: bqclient says so
// once. "" and false when no attempt of name waits.
func (c *Client) Waiting(name string) (what string, clash bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.slots[name]
	if s == nil || s.mutex == nil {
		return "", false
	}
	w := c.bk.Waiting(name)
	if w.Phase == "held" || w.Phase == "exit" {
		return "", false
	}
	what, _ = waitWords(s.mutex.mode, w, len(c.view().ids))
	for _, a := range w.Ahead {
		if a.Statement != nil && clashHint(s.mutex.mode, wire.HoldingOf(a.Statement)) != "" {
			clash = !w.ServersShort()
		}
	}
	return what, clash
}

// abandon gives up the attempt: it sends the attempt's Exit and returns at
// once, so a Lock whose context ends returns when it ends. The turn ends only
// when the attempt is really gone (its Exit applied, its session lost, or the
// client closed): a goroutine keeps the turn until then, so a next Lock of
// this name waits for it (within its own context) instead of failing on the
// attempt in progress.
func (m *Mutex) abandon(events <-chan slotEvent, t *turn) {
	c := m.c
	c.mu.Lock()
	c.apply(c.bk.Abandon(time.Now(), m.name))
	c.mu.Unlock()
	go m.awaitAbandoned(events, t)
}

// awaitAbandoned waits for an abandoned attempt to end and ends its turn.
func (m *Mutex) awaitAbandoned(events <-chan slotEvent, t *turn) {
	var lost <-chan struct{}
	for {
		select {
		case ev := <-events:
			switch ev.Kind {
			case bakery.Failed, bakery.Released:
				t.end()
				return
			case bakery.Acquired:
				// Raced with the cancellation: the Abandon releases it,
				// unless the lease guarantee fails first.
				lost = ev.holding.lost
			}
		case <-lost:
			return // the holding was lost, which ended the turn; no Exit will be reported
		case <-m.c.closed:
			return
		}
	}
}

func (m *Mutex) unlock(ctx context.Context, h *Holding) error {
	c := m.c
	start := time.Now()
	s := c.slot(m)
	c.mu.Lock()
	if s.holding != h {
		select {
		case <-h.lost:
			// The work under the lost holding has stopped: its release,
			// if it still waits (the grace, or ExitLostOnUnlock), goes now.
			eff, _ := c.bk.ReleaseLost(m.name)
			c.apply(eff)
			c.mu.Unlock()
			return ErrLockLost
		default:
		}
		c.mu.Unlock()
		if c.isClosing() {
			return ErrClosed // Close released it
		}
		return ErrNotHeld
	}
	eff, err := c.bk.Unlock(time.Now(), m.name)
	if err != nil {
		c.mu.Unlock()
		if c.isClosing() {
			return ErrClosed // Close is releasing it
		}
		return err
	}
	s.holding = nil
	events := s.events
	c.apply(eff)
	c.mu.Unlock()
	for {
		select {
		case ev := <-events:
			if ev.Kind == bakery.Released || ev.Kind == bakery.Failed {
				h.turn.end()
				return nil
			}
		case <-ctx.Done():
			// The Exit is on its way to every server; the name stays busy
			// here until it completes.
			c.mu.Lock()
			what, _ := describeWait(m.name, m.mode, c.bk.Waiting(m.name), len(c.view().ids))
			c.mu.Unlock()
			go m.drain(events, h.turn)
			return gaveUp(ctx, time.Since(start), "the release of "+what, true)
		case <-c.closed:
			return ErrClosed
		}
	}
}

// drain ends the turn once an Unlock whose caller gave up completes.
func (m *Mutex) drain(events <-chan slotEvent, t *turn) {
	for {
		select {
		case ev := <-events:
			if ev.Kind == bakery.Released || ev.Kind == bakery.Failed {
				t.end()
				return
			}
		case <-m.c.closed:
			return
		}
	}
}
