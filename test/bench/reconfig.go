package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// The reconfiguration workload (docs/protocol.md change 43, issue 28): the
// pause a client sees while a member is replaced. --contenders clients
// loop Lock+Unlock on one lock while --reconfig-held other locks are held
// by other clients; after a baseline of --duration, `bqserver server replace
// 2` runs and the new server is started; the run goes on for --duration
// after the new server serves. Reported: Lock p50/p99 and the longest gap
// between two acquisitions, before the change and from its start on.

// reconfigMark is one acquisition: when Lock returned and how long it took.
type reconfigMark struct {
	at   time.Time
	took time.Duration
}

type reconfigPhase struct {
	acq      int
	p50, p99 float64 // ms
	gap      float64 // ms, longest between two acquisitions
}

func phaseOf(ms []reconfigMark) reconfigPhase {
	var d durations
	var gap time.Duration
	for i, m := range ms {
		d = append(d, m.took)
		if i > 0 {
			gap = max(gap, m.at.Sub(ms[i-1].at))
		}
	}
	return reconfigPhase{acq: len(ms), p50: d.ms(0.5), p99: d.ms(0.99), gap: float64(gap) / float64(time.Millisecond)}
}

// runReconfig runs the workload on a fresh 4-server cluster and prints one
// report.
func runReconfig(ctx context.Context, o *options, work string, e env) error {
	b, err := startCluster(o.bqserver, work, "", clusterOptions{name: "bq"})
	if err != nil {
		return err
	}
	defer b.stop()
	// The held locks: reconfigHolders clients, each holding its share.
	const holders = 10
	per := (o.reconfigHeld + holders - 1) / holders
	var held []locker
	defer func() { closeAll(held) }()
	if o.reconfigHeld > 0 {
		hs, err := b.dialEach(ctx, holders, func(int) (string, *fence) { return "unused", nil })
		if err != nil {
			return err
		}
		held = hs
		var wg sync.WaitGroup
		errs := make([]error, holders)
		for i, h := range hs {
			c := h.(*bqLocker).c
			wg.Go(func() {
				for k := range per {
					if _, err := c.Mutex(fmt.Sprintf("bench-held-%d-%d", i, k)).Lock(ctx); err != nil {
						errs[i] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return fmt.Errorf("holding %d locks: %w", o.reconfigHeld, err)
			}
		}
	}
	f := &fence{}
	ls, err := b.dial(ctx, o.contenders, "bench-reconfig", f)
	if err != nil {
		return err
	}
	defer closeAll(ls)
	var mu sync.Mutex
	var marks []reconfigMark
	var loopErr error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				lctx, cancel := context.WithTimeout(ctx, time.Minute)
				err := l.Lock(lctx)
				cancel()
				if err != nil {
					mu.Lock()
					loopErr = err
					mu.Unlock()
					return
				}
				now := time.Now()
				mu.Lock()
				marks = append(marks, reconfigMark{at: now, took: now.Sub(t0)})
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					mu.Lock()
					loopErr = err
					mu.Unlock()
					return
				}
			}
		})
	}
	sleep := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	sleep(o.warm + o.contended)
	change := time.Now()
	out, err := exec.CommandContext(ctx, o.bqserver, "server", "replace", "2", "--dir", b.dir, "--timeout", "30s").CombinedOutput()
	pushed := time.Since(change)
	if err != nil {
		close(stop)
		wg.Wait()
		return fmt.Errorf("bqserver server replace: %v\n%s", err, out)
	}
	s4, err := startChild("bqserver-4", filepath.Join(work, "bqserver-4.log"), o.bqserver, "run", "--dir", b.dir, "--id", "4")
	if err == nil {
		b.servers = append(b.servers, s4)
		err = s4.waitLog(`msg="serving the cluster's epoch"`, 1, 30*time.Second)
	}
	joined := time.Since(change)
	if err == nil {
		sleep(o.contended)
	}
	close(stop)
	wg.Wait()
	if err != nil {
		return err
	}
	if loopErr != nil {
		return fmt.Errorf("a contender: %w", loopErr)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(marks, func(a, b reconfigMark) int { return a.at.Compare(b.at) })
	i := 0
	warmEnd := marks[0].at.Add(o.warm)
	for i < len(marks) && marks[i].at.Before(warmEnd) {
		i++
	}
	j := i
	for j < len(marks) && marks[j].at.Before(change) {
		j++
	}
	before, after := phaseOf(marks[i:j]), phaseOf(marks[j:])
	// The gap across the change's start counts for the change.
	if j > 0 && j < len(marks) {
		after.gap = max(after.gap, float64(marks[j].at.Sub(marks[j-1].at))/float64(time.Millisecond))
	}
	w := os.Stdout
	fmt.Fprintf(w, "# reconfiguration: server replace 2 under %d contenders, %d other locks held; %s\n", o.contenders, o.reconfigHeld, e)
	fmt.Fprintf(w, "replace pushed and sealed in %v; new server serving %v after the change began\n", pushed.Round(time.Millisecond), joined.Round(time.Millisecond))
	fmt.Fprintf(w, "%-8s %6s %9s %9s %12s\n", "phase", "acq", "p50 ms", "p99 ms", "max gap ms")
	fmt.Fprintf(w, "%-8s %6d %9.1f %9.1f %12.1f\n", "before", before.acq, before.p50, before.p99, before.gap)
	fmt.Fprintf(w, "%-8s %6d %9.1f %9.1f %12.1f\n", "change", after.acq, after.p50, after.p99, after.gap)
	fmt.Fprintf(w, "fence errors: %d\n", f.bad)
	if f.bad > 0 {
		return fmt.Errorf("%d fencing tokens did not grow", f.bad)
	}
	return nil
}
