package sim

import (
	"time"

	"github.com/bq-lock/bq/bakery"
)

// driver plays one client's role: it decides when to call Lock, Unlock,
// Abandon, Read and GetSet, reacting to the client's events. It reacts by
// scheduling, never inline, so every action is its own traced event.
type driver struct {
	w    *World
	c    int
	role Role
	// busy: an operation (or a whole lock/hold/unlock cycle) is under way.
	busy bool
	// lock: the lock of the current cycle (lockers, joiners); nesters use Locks[0] then Locks[1].
	lock string
	// wanted: the locks this cycle took or is taking, in order.
	wanted []string
	// holding: locks held now.
	holding map[string]bool
	// ops: reads and getSets outstanding (readers).
	ops            int
	crashOnAcquire bool
	// epoch invalidates scheduled actions of an earlier cycle.
	epoch int
	// retired: the application starts nothing more (its process and
	// session live on); set by targeted tests (World.Retire).
	retired bool
}

const pollEvery = 50 * time.Millisecond

func newDriver(w *World, c int, role Role) *driver {
	return &driver{w: w, c: c, role: role, holding: make(map[string]bool)}
}

func (d *driver) alive() bool { return d.w.cli[d.c].alive }

func (d *driver) idle() bool { return !d.busy && d.ops == 0 }

// after runs fn after dt, or when the client's process pause ends: the
// application is paused with it.
func (d *driver) after(dt time.Duration, fn func()) {
	d.w.after(dt, func() { d.w.whenThawed(d.w.clientNode(d.c), fn) })
}

func (d *driver) think() time.Duration { return d.w.between(d.w.sc.ThinkMin, d.w.sc.ThinkMax) }
func (d *driver) hold() time.Duration {
	if d.w.rng.Float64() < d.w.sc.LongHoldProb {
		return d.w.between(d.w.sc.LongHold/2, d.w.sc.LongHold)
	}
	return d.w.between(d.w.sc.HoldMin, d.w.sc.HoldMax)
}

// wake starts the next operation, unless the workload has stopped.
func (d *driver) wake() {
	if !d.alive() || d.w.now >= d.w.stop || d.retired {
		return
	}
	if node := d.w.clientNode(d.c); d.w.frozen(node) {
		d.w.whenThawed(node, d.wake)
		return
	}
	w := d.w
	switch d.role {
	case RoleCandidate:
		w.candidateWake(d)
		return
	case RoleReader:
		if d.ops < 2 {
			lock := w.sc.Locks[w.rng.IntN(len(w.sc.Locks))]
			if w.rng.IntN(2) == 0 {
				d.ops++
				w.Read(d.c, lock, w.rng.IntN(len(w.cli)))
			} else {
				d.ops++
				w.GetSet(d.c, lock)
			}
		}
		d.after(d.think()/2, d.wake)
		return
	}
	if d.busy {
		return
	}
	d.epoch++
	d.busy = true
	switch d.role {
	case RoleNester:
		d.wanted = []string{w.sc.Locks[0], w.sc.Locks[1%len(w.sc.Locks)]}
	default:
		d.wanted = []string{w.sc.Locks[w.rng.IntN(len(w.sc.Locks))]}
	}
	d.lockNext()
	if d.role == RoleJoiner {
		ep := d.epoch
		d.after(w.between(50*time.Millisecond, time.Second), func() {
			if d.epoch == ep && d.alive() {
				d.abandonAll()
			}
		})
	}
}

// lockNext calls Lock on the first wanted lock not yet held.
func (d *driver) lockNext() {
	for _, l := range d.wanted {
		if d.holding[l] {
			continue
		}
		if d.w.cli[d.c].c.Attempt(l) != 0 {
			// The last attempt's Exit is still under way: try again shortly.
			ep := d.epoch
			d.after(pollEvery, func() {
				if d.epoch == ep && d.alive() {
					d.lockNext()
				}
			})
			return
		}
		d.lock = l
		if err := d.w.Lock(d.c, l, d.role == RoleTryLocker); err != nil {
			d.w.trace("c%d: Lock(%s): %v", d.c, l, err)
			d.drain()
		}
		return
	}
}

func (d *driver) onEvent(ev bakery.Event) {
	w := d.w
	if d.role == RoleCandidate {
		w.candidateEvent(d, ev)
		return
	}
	switch ev.Kind {
	case bakery.ReadDone, bakery.SetDone:
		d.ops--
		return
	case bakery.Acquired:
		d.holding[ev.Lock] = true
		if d.crashOnAcquire {
			d.after(w.between(0, 200*time.Millisecond), func() { w.crashClient(d.c) })
			return
		}
		if d.role == RoleJoiner {
			return // it leaves when its timer says so
		}
		if len(d.holding) < len(d.wanted) {
			d.later(d.lockNext)
			return
		}
		ep := d.epoch
		d.after(d.hold(), func() {
			if d.epoch == ep && d.alive() {
				d.releaseAll()
			}
		})
	case bakery.Lost:
		delete(d.holding, ev.Lock)
		if d.role != RoleJoiner {
			d.later(d.releaseAll)
		}
	case bakery.Failed:
		if d.role != RoleJoiner {
			d.later(d.releaseAll)
		}
	}
}

// later runs fn as its own event, unless a new cycle began meanwhile.
func (d *driver) later(fn func()) {
	ep := d.epoch
	d.after(0, func() {
		if d.epoch == ep && d.alive() {
			fn()
		}
	})
}

// releaseAll unlocks every held lock and abandons every other attempt of
// the cycle, then waits for the client to finish them.
func (d *driver) releaseAll() {
	w := d.w
	for i := len(d.wanted) - 1; i >= 0; i-- {
		l := d.wanted[i]
		if d.holding[l] {
			delete(d.holding, l)
			if err := w.Unlock(d.c, l); err != nil {
				w.trace("c%d: Unlock(%s): %v", d.c, l, err)
			}
		} else if cl := w.cli[d.c].c; cl.Attempt(l) != 0 {
			w.Abandon(d.c, l)
		}
	}
	d.drain()
}

func (d *driver) abandonAll() {
	for _, l := range d.wanted {
		delete(d.holding, l)
		if d.w.cli[d.c].c.Attempt(l) != 0 {
			d.w.Abandon(d.c, l)
		}
	}
	d.drain()
}

// drain waits until the client has no attempt left, then thinks and wakes.
func (d *driver) drain() {
	d.epoch++
	ep := d.epoch
	var poll func()
	poll = func() {
		if d.epoch != ep || !d.alive() {
			return
		}
		for _, l := range d.w.sc.Locks {
			if d.w.cli[d.c].c.Attempt(l) != 0 {
				d.after(pollEvery, poll)
				return
			}
		}
		d.busy = false
		d.holding = make(map[string]bool)
		d.after(d.think(), d.wake)
	}
	d.after(0, poll)
}
