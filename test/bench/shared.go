package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bq-lock/bq"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"
)

// Shared holdings (docs/protocol.md change 60, issue 45): the readers
// workload (K readers and one writer on one lock, against etcd's recipe
// RWMutex) and the semaphore workload (K clients on k permits; etcd has no
// semaphore recipe, so bq alone).

// readHold is how long a reader (or a permit holder) stays in: long enough
// that holders overlap, short against a lock's round trips.
const readHold = 2 * time.Millisecond

// writerThink is the writer's pause between its writes: a configuration
// updated now and then while it is read all the time.
const writerThink = 20 * time.Millisecond

// sharedResult is what happened in the measured window of a readers or
// semaphore run.
type sharedResult struct {
	Window time.Duration
	// Reads counts the readers' (or permit holders') acquisitions whose
	// Lock returned in the window, Writes the writer's.
	Reads, Writes int
	// ReadLock and WriteLock are those Locks' latencies: WriteLock is how
	// long the writer waited for the readers ahead of it to leave.
	ReadLock, WriteLock durations
	// Together is the most holders inside at once; Overlaps counts the
	// entries the mode forbids (a writer with anyone, a reader with a
	// writer, more than Permits holders): must be 0.
	Together, Overlaps int
	Permits            int // 0: the readers workload
}

// namedShared is a shared workload's run under its name.
type namedShared struct {
	what string
	res  *sharedResult // nil: not run
}

// sharedRuns lists a system's shared workloads, readers first.
func (s *sysResult) sharedRuns() []namedShared {
	return []namedShared{{"readers", s.readers}, {"semaphore", s.semaphore}}
}

func (r sharedResult) readsPerSec() float64 { return float64(r.Reads) / r.Window.Seconds() }

// runShared runs readers (Lock is RLock, or Acquire of permits) each in a
// loop Lock → readHold → Unlock, and writer (nil for a semaphore) in a loop
// Lock → Unlock → writerThink, for warm+window; only Locks that return in
// [warm, warm+window) count. permits is the semaphore's count (0: readers).
func runShared(ctx context.Context, readers []locker, writer locker, permits int, warm, window time.Duration) (sharedResult, error) {
	base := time.Now()
	mono := func() time.Duration { return time.Since(base) }
	winEnd := warm + window
	ctx, cancel := context.WithTimeout(ctx, winEnd+2*time.Minute)
	defer cancel()
	var inside, writing atomic.Int32
	var mu sync.Mutex
	r := sharedResult{Window: window, Permits: permits}
	var errs []error
	loop := func(l locker, isWriter bool) {
		for {
			t0 := mono()
			if t0 >= winEnd {
				return
			}
			if err := l.Lock(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				cancel()
				return
			}
			t1 := mono()
			n := inside.Add(1)
			bad := false
			if isWriter {
				writing.Add(1)
				bad = n != 1
			} else {
				bad = writing.Load() != 0 || (permits > 0 && int(n) > permits)
			}
			mu.Lock()
			r.Together = max(r.Together, int(n))
			if bad {
				r.Overlaps++
			}
			if t1 >= warm && t1 < winEnd {
				if isWriter {
					r.Writes++
					r.WriteLock = append(r.WriteLock, t1-t0)
				} else {
					r.Reads++
					r.ReadLock = append(r.ReadLock, t1-t0)
				}
			}
			mu.Unlock()
			if !isWriter {
				time.Sleep(readHold)
			}
			if isWriter {
				writing.Add(-1)
			}
			inside.Add(-1)
			if err := l.Unlock(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				cancel()
				return
			}
			if isWriter {
				time.Sleep(writerThink)
			}
		}
	}
	var wg sync.WaitGroup
	for _, l := range readers {
		wg.Go(func() { loop(l, false) })
	}
	if writer != nil {
		wg.Go(func() { loop(writer, true) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil && !errors.Is(err, context.Canceled) {
		return r, err
	}
	return r, nil
}

// dialModes opens k bq clients like dial, each taking name in the mode
// acquire gives it.
func (b *bqCluster) dialModes(ctx context.Context, k int, name string, acquire func(c *bq.Client) func(context.Context) (*bq.Holding, error)) ([]locker, error) {
	ls, err := b.dial(ctx, k, name, nil)
	if err != nil {
		return nil, err
	}
	for _, l := range ls {
		bl := l.(*bqLocker)
		bl.acquire = acquire(bl.c)
	}
	return ls, nil
}

// runBQShared runs the readers workload (readers K readers) and the
// semaphore workload (semClients clients on permits) on b.
func runBQShared(ctx context.Context, o *options, name string, b *bqCluster) (rw, sem *sharedResult, err error) {
	if o.workloads["readers"] {
		rs, err := b.dialModes(ctx, o.readers, "bench-readers", func(c *bq.Client) func(context.Context) (*bq.Holding, error) {
			return c.RWMutex("bench-readers").RLock
		})
		if err != nil {
			return nil, nil, err
		}
		ws, err := b.dial(ctx, 1, "bench-readers", &fence{})
		if err != nil {
			closeAll(rs)
			return nil, nil, err
		}
		logf("%s: readers, %d readers and a writer for %v", name, o.readers, o.contended)
		res, err := runShared(ctx, rs, ws[0], 0, o.warm, o.contended)
		closeAll(append(rs, ws...))
		if err != nil {
			return nil, nil, fmt.Errorf("readers: %w", err)
		}
		rw = &res
	}
	if o.workloads["semaphore"] {
		ls, err := b.dialModes(ctx, o.semClients, "bench-semaphore", func(c *bq.Client) func(context.Context) (*bq.Holding, error) {
			return c.Semaphore("bench-semaphore", o.permits).Acquire
		})
		if err != nil {
			return nil, nil, err
		}
		logf("%s: semaphore, %d clients on %d permits for %v", name, o.semClients, o.permits, o.contended)
		res, err := runShared(ctx, ls, nil, o.permits, o.warm, o.contended)
		closeAll(ls)
		if err != nil {
			return nil, nil, fmt.Errorf("semaphore: %w", err)
		}
		sem = &res
	}
	return rw, sem, nil
}

// etcdRWLocker is one etcd client with its own session on a recipe
// RWMutex, reading (RLock) or writing.
type etcdRWLocker struct {
	*etcdLocker
	rw     *recipe.RWMutex
	reader bool
}

func (l *etcdRWLocker) Lock(context.Context) error {
	if l.reader {
		return l.rw.RLock()
	}
	return l.rw.Lock()
}

func (l *etcdRWLocker) Unlock(context.Context) error {
	if l.reader {
		return l.rw.RUnlock()
	}
	return l.rw.Unlock()
}

// runEtcdReaders runs the readers workload on etcd's recipe RWMutex.
func runEtcdReaders(ctx context.Context, o *options, name string, e *etcdCluster) (*sharedResult, error) {
	const key = etcdLockKey + "-readers"
	ls, err := e.dial(ctx, o.readers+1, key)
	if err != nil {
		return nil, err
	}
	var readers []locker
	var writer locker
	for i, l := range ls {
		el := l.(*etcdLocker)
		rl := &etcdRWLocker{etcdLocker: el, rw: recipe.NewRWMutex(el.s, key), reader: i > 0}
		if i == 0 {
			writer = rl
		} else {
			readers = append(readers, rl)
		}
	}
	logf("%s: readers, %d readers and a writer for %v (recipe RWMutex)", name, o.readers, o.contended)
	res, err := runShared(ctx, readers, writer, 0, o.warm, o.contended)
	closeAll(ls)
	if err != nil {
		return nil, fmt.Errorf("readers: %w", err)
	}
	return &res, nil
}
