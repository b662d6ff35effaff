package core

import (
	"maps"
	"slices"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// The J of each lock's hw (docs/protocol.md change 47). A copier takes an hw
// Ticket on its own only with its J, checked against the keys of the J's
// epoch, which must be the epoch copied from or a later one: otherwise a
// faulty member's hw, signed by a key it made up, would count (the lock's
// next ticket met the cap at every new member). The register that brought
// the Ticket drops its J when it moves on (an Exit), so the lock keeps the
// J of its hw while that J is of the epoch served or a later one; once this
// server serves a later epoch the next copy vouches for that hw as the
// (f+1)-th highest reported (every correct member holds it then: F2), and
// the J goes.

// bucketHWJ: lock → the lock's hw Ticket with its J (a wire.Forward), while
// the J is of the epoch served or a later one.
const bucketHWJ = "hwj"

// keepHWJ records j as the J of lock name's new hw ss, if j is of the epoch
// served or a later one; otherwise the lock keeps no J.
func (k *Core) keepHWJ(name string, ss wire.SignedStatement, j []wire.SignedView, e *Effects) {
	if len(j) > 0 && wire.JustificationEpoch(j) >= k.cfg.Keys.Epoch {
		k.hwJ[name] = j
		e.Persist = append(e.Persist, Record{Bucket: bucketHWJ, Key: []byte(name), Value: mustMarshal(&wire.Forward{Statement: ss, J: j})})
		return
	}
	if _, ok := k.hwJ[name]; ok {
		delete(k.hwJ, name)
		e.Persist = append(e.Persist, Record{Bucket: bucketHWJ, Key: []byte(name), Delete: true})
	}
}

// dropOldHWJ drops the J of every hw whose J is of an epoch before the one
// now served (at the end of a copy).
func (k *Core) dropOldHWJ(e *Effects) {
	for _, name := range slices.Sorted(maps.Keys(k.hwJ)) {
		if wire.JustificationEpoch(k.hwJ[name]) < k.cfg.Keys.Epoch {
			delete(k.hwJ, name)
			e.Persist = append(e.Persist, Record{Bucket: bucketHWJ, Key: []byte(name), Delete: true})
		}
	}
}

// hwWithJ is lock name's hw with its J, if this server keeps one.
func (k *Core) hwWithJ(name string) (wire.Forward, bool) {
	j, ok := k.hwJ[name]
	if !ok {
		return wire.Forward{}, false
	}
	return wire.Forward{Statement: k.locks[name].HW().Signed, J: j}, true
}

// restoreHWJ puts back a persisted hw J if it is still the J of its lock's
// hw, of the epoch served or a later one, and checks out; otherwise the
// record goes with the first Tick.
func (k *Core) restoreHWJ(key, v []byte) {
	var f wire.Forward
	keep := func() bool {
		if crypto.Unmarshal(v, &f) != nil || wire.JustificationEpoch(f.J) < k.cfg.Keys.Epoch {
			return false
		}
		lock := k.locks[string(key)]
		if lock == nil || lock.HW() == nil || string(lock.HW().Signed.Signed.Body) != string(f.Statement.Signed.Body) {
			return false
		}
		keys, q, views := k.keysForJ(f.J, k.anyJ())
		return bakery.CheckTicket(lock.HW().St, f.J, keys, q, k.verify, views) == nil
	}
	if keep() {
		k.hwJ[string(key)] = f.J
		return
	}
	k.collectOnStart = append(k.collectOnStart, Record{Bucket: bucketHWJ, Key: append([]byte(nil), key...), Delete: true})
}
