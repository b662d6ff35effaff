package sim

import (
	"slices"
	"time"
)

// Lagging correct servers: for a stretch, up to n−q correct servers hear
// late — everything some clients and every server send them arrives only
// when the stretch ends (each channel stays FIFO) — while they answer every
// other client at once, from state that lacks those statements. Together with
// up to f stale or lying faulty servers this is the most a quorum system of
// n ≥ 3f+1 must tolerate: (n−q) + f < q. Any read, getSet, ticket or listen
// decision taken on fewer than q servers, or a union of member sets over
// fewer, then sees only stale and lying servers and shows as a violation of
// regularity, getSet, mutual exclusion, FCFS or fencing.

// The schedule that hurts most: the clients split in two groups. The
// lagging servers hear group A (and every server) late, so they lack A's
// statements; the faulty servers may lie about A too; and the other correct
// servers answer group B a little late, so that B hears first from exactly
// the lagging and faulty servers: (n−q) + f = q−1 of them when n = 3f+1. A
// B client that decides before q servers answered decides on servers none
// of which shows A's statements.

// lag is one stretch of lagging channels.
type lag struct {
	until time.Duration
	from  map[int]bool // nodes whose messages to the lagging servers arrive late
	to    map[int]bool // the lagging servers
	// slowFrom → slowTo: the other correct servers answer group B this late.
	slowFrom, slowTo map[int]bool
	slowBy           time.Duration
}

func (w *World) startLag(f Fault) {
	l := lag{until: w.now + f.Dur, from: make(map[int]bool), to: make(map[int]bool),
		slowFrom: make(map[int]bool), slowTo: make(map[int]bool), slowBy: f.Dur / 8}
	for _, s := range f.Servers {
		if s < len(w.srv) && w.srv[s].byz == nil {
			l.to[s] = true
		}
	}
	for s := range w.srv {
		l.from[s] = true
		if !l.to[s] && w.srv[s].byz == nil {
			l.slowFrom[s] = true
		}
	}
	for c := range w.cli {
		if slices.Contains(f.Clients, c) {
			l.from[w.clientNode(c)] = true
		} else {
			l.slowTo[w.clientNode(c)] = true
		}
	}
	w.lags = append(w.lags, l)
}

// lagUntil is when a message sent now from → to may arrive at the earliest
// because of a lag (zero if none).
func (w *World) lagUntil(from, to int) time.Duration {
	var end time.Duration
	w.lags = slices.DeleteFunc(w.lags, func(l lag) bool { return l.until <= w.now })
	for _, l := range w.lags {
		if l.to[to] && l.from[from] && from != to {
			end = max(end, l.until)
		}
		if l.slowFrom[from] && l.slowTo[to] {
			end = max(end, w.now+l.slowBy)
		}
	}
	return end
}
