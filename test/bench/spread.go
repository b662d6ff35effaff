package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
)

// The spread workload (issue 29.3): K clients, each looping Lock → Unlock
// on a lock of its own, where the contended and scaling workloads put every
// client on one lock; and a mixed variant, K clients over K/4 locks (client
// i on lock i mod K/4, so four to a lock). It measures what a cluster does
// with many independent locks at once: aggregate acquisitions/s, the
// Lock+Unlock latency, and CPU per acquisition (servers + client, as in
// the contended workload).

// spreadRow is one run of the spread workload: Clients clients on Names
// locks. Err is set, and the rest empty, when the run could not be made
// (e.g. too many clients for the machine's limits).
type spreadRow struct {
	Clients, Names int
	Warm           time.Duration
	R              contendedResult
	W              window
	Err            error
}

// spreadShapes is the (clients, names) of each row: for each K, K clients
// on K locks, then on K/4 (the mixed row; none when K/4 is not less than K).
func spreadShapes(ks []int) [][2]int {
	var out [][2]int
	for _, k := range ks {
		out = append(out, [2]int{k, k})
		if m := max(1, k/4); m < k {
			out = append(out, [2]int{k, m})
		}
	}
	return out
}

// spreadTimes is the warm-up and the window with k clients: step up to 16,
// ×2 at 64, ×4 at 256 (√(k/16), rounded up), so that the larger runs still
// give each client a few acquisitions; the warm-up is a third of the
// window (at least warm), for every client's first Lock to be behind it.
func spreadTimes(warm, step time.Duration, k int) (time.Duration, time.Duration) {
	w := step * time.Duration(max(1, int(math.Ceil(math.Sqrt(float64(k)/16)))))
	return max(warm, (w / 3).Round(time.Millisecond)), w
}

// spreadStep runs clients clients on names locks (dial opens them, client i
// on lock lockOf[i]) and reads CPU and counters over the window. A failure
// of this row (dial or run) is in the row's Err; only an interrupt or the
// run's --timeout ends the workload.
func spreadStep(ctx context.Context, o *options, sys string, clients, names int, dial func(lockOf []int) ([]locker, error), pids []int, metrics []string) (spreadRow, error) {
	warm, win := spreadTimes(o.warm, o.step, clients)
	row := spreadRow{Clients: clients, Names: names, Warm: warm}
	lockOf := make([]int, clients)
	for i := range lockOf {
		lockOf[i] = i % names
	}
	logf("%s: spread, %d clients on %d locks, %v + %v", sys, clients, names, warm, win)
	ls, err := dial(lockOf)
	if err != nil {
		if ctx.Err() != nil {
			return row, ctx.Err()
		}
		row.Err = fmt.Errorf("dial: %w", err)
		logf("%s: spread, %d clients on %d locks: %v", sys, clients, names, brief(row.Err))
		return row, nil
	}
	var res contendedResult
	row.W, err = measure(pids, metrics, func(atStart, atEnd func()) error {
		var err error
		res, err = onLocks(ctx, ls, lockOf, warm, win, atStart, atEnd)
		return err
	})
	closeAll(ls)
	if err != nil {
		if ctx.Err() != nil {
			return row, ctx.Err()
		}
		row.Err = err
		row.W = window{}
		logf("%s: spread, %d clients on %d locks: %v", sys, clients, names, brief(row.Err))
		return row, nil
	}
	row.R = res
	return row, nil
}

// runSpread runs every spread row on one system; dial opens a row's
// clients, client i on its lock lockOf[i] (of names).
func runSpread(ctx context.Context, o *options, sys string, dial func(clients, names int, lockOf []int) ([]locker, error), pids []int, metrics []string) ([]spreadRow, error) {
	var rows []spreadRow
	for _, sh := range spreadShapes(o.spread) {
		clients, names := sh[0], sh[1]
		row, err := spreadStep(ctx, o, sys, clients, names, func(lockOf []int) ([]locker, error) { return dial(clients, names, lockOf) }, pids, metrics)
		if err != nil {
			return rows, fmt.Errorf("spread, %d clients on %d locks: %w", clients, names, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// brief is err's message cut to its first line and 300 bytes (a dial of
// 256 clients can fail 256 times).
func brief(err error) string {
	s := err.Error()
	lines := strings.Split(s, "\n")
	s = lines[0]
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	if len(lines) > 1 {
		s += fmt.Sprintf(" (and %d more lines)", len(lines)-1)
	}
	return s
}

// spreadOverlaps counts the holders that found another inside, over rows.
func spreadOverlaps(rows []spreadRow) int {
	n := 0
	for _, r := range rows {
		n += r.R.Overlaps
	}
	return n
}
