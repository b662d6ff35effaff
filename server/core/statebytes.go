package core

import (
	"fmt"

	"github.com/bq-lock/bq/activeset"
	"github.com/bq-lock/bq/wire"
)

// Live state bytes (docs/protocol.md change 25): what the registers of every
// lock and the J of every Ticket take, bounded by MaxStateBytes. A statement
// that would add a register (a client with no value at the lock) past the
// bound is refused; one that replaces a client's own value never is, so a
// client already in a lock can always go on and leave.

// jSize is about what a Ticket's J takes.
func jSize(j []wire.SignedView) int {
	n := 0
	for _, v := range j {
		n += len(v.Signed.Body) + len(v.Signed.Sig) + 32
	}
	return n
}

// setJustified records a Ticket's J.
func (k *Core) setJustified(rk regKey, jt justifiedTicket) {
	k.dropJustified(rk)
	jt.size = jSize(jt.j)
	k.justified[rk] = jt
	k.stateBytes += jt.size
}

// dropJustified forgets a register's J, if it has one; it reports whether
// it had.
func (k *Core) dropJustified(rk regKey) bool {
	jt, ok := k.justified[rk]
	if ok {
		delete(k.justified, rk)
		k.stateBytes -= jt.size
		if jt.proc != nil {
			k.stateBytes -= jt.proc.size
		}
	}
	return ok
}

// lockChanged accounts for a change of lock's registers, given its Bytes
// before.
func (k *Core) lockChanged(lock *activeset.Lock, before int) {
	k.stateBytes += lock.Bytes() - before
}

// roomFor refuses a statement that would add a register of size bytes (and
// a J of j) when the live state is at its bound.
func (k *Core) roomFor(lock *activeset.Lock, c wire.ClientID, size int, j []wire.SignedView) error {
	if lock.Highest(c) != nil || k.stateBytes+size+jSize(j) <= k.cfg.MaxStateBytes {
		return nil
	}
	return &LimitError{Name: "max_state_bytes", Value: uint64(k.cfg.MaxStateBytes), Shown: fmt.Sprintf("%d MiB", k.cfg.MaxStateBytes>>20),
		What: fmt.Sprintf("this server holds %d MiB of registers and justifications", k.stateBytes>>20)}
}

// recountStateBytes is the live state counted afresh (for tests: it must
// equal stateBytes).
func (k *Core) recountStateBytes() int {
	n := 0
	for _, lock := range k.locks {
		for _, e := range lock.Entries() {
			n += e.Size()
		}
	}
	for _, jt := range k.justified {
		n += jSize(jt.j)
		if jt.proc != nil {
			n += proclamationSize(&jt.proc.signed)
		}
	}
	return n
}
