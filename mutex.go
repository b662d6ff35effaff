package bq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/internal/wire"
)

// Token is a fencing token: every holding of a lock gets one, and they grow
// from each holder to the next (PROTOCOL.md §7).
type Token = bakery.Token

// Mutex is one lock name of a cluster, seen from one client.
type Mutex struct {
	c    *Client
	name string
}

// Mutex returns the lock called name. Names are 1..256 bytes of UTF-8.
func (c *Client) Mutex(name string) *Mutex { return &Mutex{c: c, name: name} }

// Name is the lock's name.
func (m *Mutex) Name() string { return m.name }

// Holding is one holding of a lock.
type Holding struct {
	m       *Mutex
	token   Token
	attempt uint64
	lost    chan struct{}
	once    sync.Once
}

// Token is the holding's fencing token.
func (h *Holding) Token() Token { return h.token }

// Lost is closed the moment the lease guarantee fails: stop using the
// resource at once. It stays open until then (also after Unlock).
func (h *Holding) Lost() <-chan struct{} { return h.lost }

func (h *Holding) lose() { h.once.Do(func() { close(h.lost) }) }

// Name is the lock's name.
func (h *Holding) Name() string { return h.m.name }

// Unlock releases the holding (EXIT) and returns once q servers applied it.
func (h *Holding) Unlock(ctx context.Context) error { return h.m.unlock(ctx, h) }

// Lock blocks until the lock is held (first come, first served) or ctx ends.
// On cancellation the attempt is abandoned and its Exit sent.
func (m *Mutex) Lock(ctx context.Context) (*Holding, error) { return m.lock(ctx, false) }

// TryLock takes the lock only if nobody is ahead; otherwise it cleans up its
// attempt and returns ErrBusy.
func (m *Mutex) TryLock(ctx context.Context) (*Holding, error) { return m.lock(ctx, true) }

func (m *Mutex) lock(ctx context.Context, try bool) (*Holding, error) {
	c := m.c
	if err := wire.CheckLockName(m.name); err != nil {
		return nil, fmt.Errorf("bq: %w", err)
	}
	s := c.slot(m)
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctxErr(ctx)
	case <-c.closed:
		return nil, ErrClosed
	}
	c.mu.Lock()
	eff, err := c.bk.Lock(time.Now(), m.name, try)
	if err != nil {
		c.mu.Unlock()
		<-s.sem
		return nil, err
	}
	s.events = make(chan slotEvent, 8)
	c.apply(eff)
	c.mu.Unlock()

	for {
		select {
		case ev := <-s.events:
			switch ev.Kind {
			case bakery.Acquired:
				return ev.holding, nil
			case bakery.Failed, bakery.Released:
				<-s.sem
				if ev.Err == nil {
					return nil, ErrNotHeld
				}
				return nil, mapBakeryErr(ev.Err)
			}
		case <-ctx.Done():
			m.abandon(s)
			return nil, ctxErr(ctx)
		case <-c.closed:
			return nil, ErrClosed
		}
	}
}

// abandon gives up the attempt, waits (bounded) for its Exit to complete,
// and frees the name.
func (m *Mutex) abandon(s *slot) {
	c := m.c
	c.mu.Lock()
	c.apply(c.bk.Abandon(time.Now(), m.name))
	c.mu.Unlock()
	timer := time.NewTimer(closeGrace)
	defer timer.Stop()
	for {
		select {
		case ev := <-s.events:
			if ev.Kind == bakery.Failed || ev.Kind == bakery.Released {
				<-s.sem
				return
			}
			if ev.Kind == bakery.Acquired {
				continue // raced with the cancellation: the Abandon releases it
			}
		case <-timer.C:
			c.log.Warn("the Exit of an abandoned attempt did not reach a quorum in time; the session lease will clear it", "lock", m.name)
			<-s.sem
			return
		case <-c.closed:
			return
		}
	}
}

func (m *Mutex) unlock(ctx context.Context, h *Holding) error {
	c := m.c
	s := c.slot(m)
	c.mu.Lock()
	if s.holding != h {
		c.mu.Unlock()
		select {
		case <-h.lost:
			return ErrLockLost
		default:
			return ErrNotHeld
		}
	}
	eff, err := c.bk.Unlock(time.Now(), m.name)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	s.holding = nil
	c.apply(eff)
	c.mu.Unlock()
	for {
		select {
		case ev := <-s.events:
			if ev.Kind == bakery.Released || ev.Kind == bakery.Failed {
				<-s.sem
				return nil
			}
		case <-ctx.Done():
			// The Exit is on its way to every server; the name stays busy
			// here until it completes.
			go m.drain(s)
			return ctxErr(ctx)
		case <-c.closed:
			return ErrClosed
		}
	}
}

// drain frees the name once an Unlock whose caller gave up completes.
func (m *Mutex) drain(s *slot) {
	for {
		select {
		case ev := <-s.events:
			if ev.Kind == bakery.Released || ev.Kind == bakery.Failed {
				<-s.sem
				return
			}
		case <-m.c.closed:
			return
		}
	}
}

func ctxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return errors.Join(ErrTimeout, ctx.Err())
	}
	return ctx.Err()
}
