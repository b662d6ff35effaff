package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// locker is one contending client of a lock service, with its own
// connection and session.
type locker interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
	Close() error
}

// durations is a sample of latencies.
type durations []time.Duration

// ms is the q-quantile in milliseconds (nearest rank), NaN when empty.
func (d durations) ms(q float64) float64 {
	if len(d) == 0 {
		return math.NaN()
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	i = max(0, min(i, len(s)-1))
	return float64(s[i]) / 1e6
}

// uncontendedResult is one client alone: each operation's latency.
type uncontendedResult struct {
	Cycle, Lock, Unlock durations
}

// opTimeout bounds one uncontended Lock+Unlock: a stuck cluster fails the run.
const opTimeout = 30 * time.Second

// uncontended runs warm Lock+Unlock cycles, then n measured ones; atStart
// and atEnd run just before the first and just after the last measured one.
func uncontended(ctx context.Context, l locker, warm, n int, atStart, atEnd func()) (uncontendedResult, error) {
	var r uncontendedResult
	for i := range warm + n {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		if i == warm && atStart != nil {
			atStart()
		}
		opCtx, cancel := context.WithTimeout(ctx, opTimeout)
		t0 := time.Now()
		err := l.Lock(opCtx)
		t1 := time.Now()
		if err == nil {
			err = l.Unlock(opCtx)
		}
		t2 := time.Now()
		cancel()
		if err != nil {
			return r, fmt.Errorf("uncontended cycle %d: %w", i, err)
		}
		if i >= warm {
			r.Cycle = append(r.Cycle, t2.Sub(t0))
			r.Lock = append(r.Lock, t1.Sub(t0))
			r.Unlock = append(r.Unlock, t2.Sub(t1))
		}
	}
	if atEnd != nil {
		atEnd()
	}
	return r, nil
}

// contendedResult is what happened in the measured window of a contended run.
type contendedResult struct {
	Window time.Duration
	// Acq counts the acquisitions whose Lock returned in the window; All
	// counts every acquisition of the run (warm-up and drain included).
	Acq, All  int
	PerClient []int
	// Lock is each windowed Lock's latency (call to return); Handoff is the
	// time from the previous holder of the same lock starting its Unlock to
	// this Lock returning; Cycle is from the Lock call to the Unlock's
	// return.
	Lock, Handoff, Cycle durations
	// Overlaps counts acquisitions that found another holder inside: must be 0.
	Overlaps int
}

func (r contendedResult) opsPerSec() float64 { return float64(r.Acq) / r.Window.Seconds() }

func (r contendedResult) fairness() (maxAcq, minAcq int, ratio float64) {
	if len(r.PerClient) == 0 {
		return 0, 0, math.NaN()
	}
	maxAcq, minAcq = slices.Max(r.PerClient), slices.Min(r.PerClient)
	if minAcq == 0 {
		return maxAcq, minAcq, math.Inf(1)
	}
	return maxAcq, minAcq, float64(maxAcq) / float64(minAcq)
}

// contended runs every locker in a loop Lock → tiny critical section →
// Unlock on one lock for warm+window. Only acquisitions whose Lock returns
// in [warm, warm+window) count; atStart and atEnd run at those two instants
// (to read counters). Clients still waiting at the end finish their attempt
// (the queue drains) before contended returns.
func contended(ctx context.Context, ls []locker, warm, window time.Duration, atStart, atEnd func()) (contendedResult, error) {
	return onLocks(ctx, ls, nil, warm, window, atStart, atEnd)
}

// onLocks is contended with ls[i] on lock lockOf[i] (nil: all on one
// lock): the overlap probe and the handoff are per lock. The lockers must
// already be on those locks; lockOf only tells which share one.
func onLocks(ctx context.Context, ls []locker, lockOf []int, warm, window time.Duration, atStart, atEnd func()) (contendedResult, error) {
	base := time.Now() // every offset below is monotonic
	mono := func() time.Duration { return time.Since(base) }
	winStart, winEnd := warm, warm+window
	ctx, cancel := context.WithTimeout(ctx, winEnd+2*time.Minute)
	defer cancel()

	// lockState is one lock's probe.
	type lockState struct {
		inside     atomic.Int32
		lastUnlock atomic.Int64 // offset of the last Unlock call's start; -1: none yet
	}
	lockIdx := func(i int) int {
		if lockOf == nil {
			return 0
		}
		return lockOf[i]
	}
	nLocks := 1
	for i := range ls {
		nLocks = max(nLocks, lockIdx(i)+1)
	}
	locks := make([]lockState, nLocks)
	for i := range locks {
		locks[i].lastUnlock.Store(-1)
	}
	var overlaps, all atomic.Int64
	type perClient struct {
		n                    int
		lock, handoff, cycle durations
		err                  error
	}
	res := make([]perClient, len(ls))
	timers := make(chan struct{})
	go func() {
		defer close(timers)
		for _, at := range []struct {
			t time.Duration
			f func()
		}{{winStart, atStart}, {winEnd, atEnd}} {
			select {
			case <-time.After(at.t - mono()):
			case <-ctx.Done():
				return
			}
			if at.f != nil {
				at.f()
			}
		}
	}()
	var wg sync.WaitGroup
	for i, l := range ls {
		ll := &locks[lockIdx(i)]
		wg.Go(func() {
			pc := &res[i]
			for {
				t0 := mono()
				if t0 >= winEnd {
					return
				}
				if err := l.Lock(ctx); err != nil {
					pc.err = fmt.Errorf("client %d: lock: %w", i, err)
					cancel()
					return
				}
				t1 := mono()
				if ll.inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				all.Add(1)
				prev := ll.lastUnlock.Load()
				counted := t1 >= winStart && t1 < winEnd
				if counted {
					pc.n++
					pc.lock = append(pc.lock, t1-t0)
					if prev >= 0 {
						pc.handoff = append(pc.handoff, t1-time.Duration(prev))
					}
				}
				ll.inside.Add(-1)
				ll.lastUnlock.Store(int64(mono()))
				if err := l.Unlock(ctx); err != nil {
					pc.err = fmt.Errorf("client %d: unlock: %w", i, err)
					cancel()
					return
				}
				if counted {
					pc.cycle = append(pc.cycle, mono()-t0)
				}
			}
		})
	}
	wg.Wait()
	<-timers
	r := contendedResult{Window: window, All: int(all.Load()), Overlaps: int(overlaps.Load())}
	var errs []error
	for _, pc := range res {
		r.Acq += pc.n
		r.PerClient = append(r.PerClient, pc.n)
		r.Lock = append(r.Lock, pc.lock...)
		r.Handoff = append(r.Handoff, pc.handoff...)
		r.Cycle = append(r.Cycle, pc.cycle...)
		if pc.err != nil && !errors.Is(pc.err, context.Canceled) {
			errs = append(errs, pc.err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	return r, ctx.Err()
}

// closeAll closes lockers in parallel.
func closeAll(ls []locker) {
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() { _ = l.Close() })
	}
	wg.Wait()
}
