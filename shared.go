package bq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bq-lock/bq/wire"
)

// Shared holdings (docs/protocol.md change 60): the bakery orders every
// holder of a name by ticket, and what a waiter waits for depends on its
// mode and theirs. A writer overlaps nobody, readers overlap only readers,
// and at most k holders of a k-permit semaphore are in at once, whatever
// malicious clients say of their own modes. Every mode is first come,
// first served, so readers never starve a writer.
//
// One client holds or waits for a name in one mode at a time: a second
// Lock of the same name by another goroutine of the client waits for the
// first holding to end, whatever the modes.

// Mode is a holding's mode: exclusive (the zero Mode), shared, or one of
// Permits permits.
type Mode = wire.Holding

// RWMutex is a readers–writer lock: many readers hold it together, a
// writer alone. Its writers' fencing tokens exceed every token granted
// before them, in either mode: a resource accepts a write whose token is at
// least the highest it has seen, and a read whose token is at least the
// highest of a write (docs/protocol.md change 60).
type RWMutex struct{ reader, writer *Mutex }

// RWMutex returns the readers–writer lock called name. Its writers exclude
// the exclusive holders of c.Mutex(name) too: an exclusive holding is a
// writer's.
func (c *Client) RWMutex(name string) *RWMutex {
	return &RWMutex{reader: &Mutex{c: c, name: name, mode: Mode{Mode: wire.ModeShared}}, writer: c.Mutex(name)}
}

// Name is the lock's name.
func (rw *RWMutex) Name() string { return rw.writer.name }

// RLock blocks until the lock is held for reading (no writer ahead) or ctx
// ends.
func (rw *RWMutex) RLock(ctx context.Context) (*Holding, error) { return rw.reader.Lock(ctx) }

// TryRLock takes the lock for reading only if no writer is ahead;
// otherwise it returns ErrBusy.
func (rw *RWMutex) TryRLock(ctx context.Context) (*Holding, error) { return rw.reader.TryLock(ctx) }

// Lock blocks until the lock is held for writing (nobody ahead) or ctx
// ends.
func (rw *RWMutex) Lock(ctx context.Context) (*Holding, error) { return rw.writer.Lock(ctx) }

// TryLock takes the lock for writing only if nobody is ahead; otherwise it
// returns ErrBusy.
func (rw *RWMutex) TryLock(ctx context.Context) (*Holding, error) { return rw.writer.TryLock(ctx) }

// RUnlock releases a read holding of this lock (h.Unlock does the same).
func (rw *RWMutex) RUnlock(ctx context.Context, h *Holding) error {
	return release(ctx, h, rw.reader)
}

// Unlock releases a write holding of this lock (h.Unlock does the same).
func (rw *RWMutex) Unlock(ctx context.Context, h *Holding) error {
	return release(ctx, h, rw.writer)
}

// Reader is the RWMutex's read side, for LockAll.
func (rw *RWMutex) Reader() Locker { return rw.reader }

// Writer is the RWMutex's write side, for LockAll.
func (rw *RWMutex) Writer() Locker { return rw.writer }

// Semaphore is a counting semaphore: at most Permits holders at once.
// Every client of one name must agree on the count: holders of another
// count exclude each other, as a writer would (safe, and shown by status).
// Its tokens order holdings but fence nothing: k holders are in together.
type Semaphore struct {
	m   *Mutex
	err error
}

// Semaphore returns the semaphore called name with permits permits, 2 to
// 1024 (a semaphore of 1 is c.Mutex(name)).
func (c *Client) Semaphore(name string, permits int) *Semaphore {
	mode := Mode{Mode: wire.ModePermits, Permits: uint32(min(max(permits, 0), wire.MaxPermits+1))}
	s := &Semaphore{m: &Mutex{c: c, name: name, mode: mode}}
	if err := mode.Check(); err != nil || permits != int(mode.Permits) {
		s.err = fmt.Errorf("bq: semaphore %q of %d permits: want 2 to %d (a semaphore of 1 is a Mutex)", name, permits, wire.MaxPermits)
	}
	return s
}

// Name is the semaphore's name.
func (s *Semaphore) Name() string { return s.m.name }

// Permits is the semaphore's count.
func (s *Semaphore) Permits() int { return int(s.m.mode.Permits) }

// Acquire blocks until one of the permits is held or ctx ends.
func (s *Semaphore) Acquire(ctx context.Context) (*Holding, error) {
	if s.err != nil {
		return nil, s.err
	}
	return s.m.Lock(ctx)
}

// TryAcquire takes a permit only if fewer than Permits holders are ahead;
// otherwise it returns ErrBusy.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Holding, error) {
	if s.err != nil {
		return nil, s.err
	}
	return s.m.TryLock(ctx)
}

// Release gives the permit back (h.Unlock does the same).
func (s *Semaphore) Release(ctx context.Context, h *Holding) error { return release(ctx, h, s.m) }

// release unlocks h after checking it is a holding of m's name and mode.
func release(ctx context.Context, h *Holding, m *Mutex) error {
	if h == nil || h.m.name != m.name || h.m.mode != m.mode {
		return fmt.Errorf("%w: not a %s holding of %q", ErrNotHeld, m.mode, m.name)
	}
	return h.Unlock(ctx)
}

// Locker is what LockAll takes: a Mutex, a Semaphore, or a side of an
// RWMutex.
type Locker interface {
	Name() string
	Lock(ctx context.Context) (*Holding, error)
}

// Lock takes a permit (Acquire), so that a Semaphore is a Locker.
func (s *Semaphore) Lock(ctx context.Context) (*Holding, error) { return s.Acquire(ctx) }

// Holdings are the holdings LockAll took, one per name.
type Holdings struct {
	list []*Holding
	lost chan struct{}
	once sync.Once
	// done is closed by Unlock: the watchers of each Lost return.
	done     chan struct{}
	doneOnce sync.Once
}

// releaseTimeout bounds LockAll's release of what it took when a later
// lock fails after its caller's context ended.
const releaseTimeout = 10 * time.Second

// LockAll takes every lock in one global order (by name), so that two
// programs that take overlapping sets of locks with LockAll never deadlock.
// If any fails (or ctx ends), those already taken are released before it
// returns the error. Two lockers of one name are refused.
func (c *Client) LockAll(ctx context.Context, lockers ...Locker) (*Holdings, error) {
	sorted := slices.Clone(lockers)
	slices.SortFunc(sorted, func(a, b Locker) int {
		switch {
		case a.Name() < b.Name():
			return -1
		case a.Name() > b.Name():
			return 1
		}
		return 0
	})
	for i := 1; i < len(sorted); i++ {
		if sorted[i].Name() == sorted[i-1].Name() {
			return nil, fmt.Errorf("bq: LockAll: %q named twice", sorted[i].Name())
		}
	}
	hs := &Holdings{lost: make(chan struct{}), done: make(chan struct{})}
	for _, l := range sorted {
		h, err := l.Lock(ctx)
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
			rerr := hs.Unlock(rctx)
			cancel()
			if rerr != nil {
				err = errors.Join(err, fmt.Errorf("bq: LockAll: releasing what it took: %w", rerr))
			}
			return nil, err
		}
		hs.list = append(hs.list, h)
		go func() {
			select {
			case <-h.Lost():
				hs.once.Do(func() { close(hs.lost) })
			case <-hs.done:
			case <-c.closed:
			}
		}()
	}
	return hs, nil
}

// List is the holdings, in the order they were taken (by name), each with
// its own fencing token (Token): pass each resource its own lock's.
func (hs *Holdings) List() []*Holding { return slices.Clone(hs.list) }

// Holding is the holding of the lock called name, for its fencing token;
// nil if LockAll took no lock of that name (or after Unlock).
func (hs *Holdings) Holding(name string) *Holding {
	for _, h := range hs.list {
		if h.Name() == name {
			return h
		}
	}
	return nil
}

// Lost is closed as soon as any of the holdings is lost: stop using every
// resource at once.
func (hs *Holdings) Lost() <-chan struct{} { return hs.lost }

// Err is nil while every holding lasts, and the first lost one's error
// after.
func (hs *Holdings) Err() error {
	for _, h := range hs.list {
		if err := h.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Unlock releases every holding, the last taken first, and returns every
// error it met.
func (hs *Holdings) Unlock(ctx context.Context) error {
	var errs []error
	for i := len(hs.list) - 1; i >= 0; i-- {
		if err := hs.list[i].Unlock(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", hs.list[i].Name(), err))
		}
	}
	hs.list = nil
	hs.doneOnce.Do(func() { close(hs.done) })
	return errors.Join(errs...)
}

// sharedMinor is the protocol minor version that brought shared holdings.
const sharedMinor = 9

// serversKnow fails a shared or permits Lock at once when so many servers
// announced a protocol before 1.9 that fewer than q can take its
// statements (a 1.8 server refuses them as malformed: docs/protocol.md
// change 60). A server not connected yet is not counted against it.
// Called with c.mu held.
func (c *Client) serversKnow(mode Mode) error {
	if mode.Mode == wire.ModeExclusive {
		return nil
	}
	v := c.view()
	var old []string
	for _, id := range v.ids {
		s := wire.ServerID(id)
		if ver := c.versions[s]; ver.Major == wire.ProtocolMajor && ver.Minor > 0 && ver.Minor < sharedMinor {
			old = append(old, fmt.Sprintf("%s (%s)", s, ver))
		}
	}
	if len(v.ids)-len(old) >= v.q {
		return nil
	}
	return &Error{msg: fmt.Sprintf("bq: a %s holding needs protocol 1.%d at %d of %d servers, and %s speak an older one: upgrade them",
		mode, sharedMinor, v.q, len(v.ids), strings.Join(old, ", ")), kinds: []error{ErrRefused}}
}
