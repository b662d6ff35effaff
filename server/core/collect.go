package core

// What a server keeps for its clients, and when it lets go of it
// (docs/protocol.md §9 and change 22): the per-client bound on locks, the
// references that keep a lock, and the collection of what a reset
// certificate ends.

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/bq-lock/bq/activeset"
	"github.com/bq-lock/bq/wire"
)

// recentResetsKept bounds recentResets.
const recentResetsKept = 1024

// lockFor returns the lock named name, creating it, within c's lock bound.
func (k *Core) lockFor(c wire.ClientID, name string) (*activeset.Lock, error) {
	if err := wire.CheckLockName(name); err != nil {
		return nil, err
	}
	if _, ok := k.clientLocks[c][name]; !ok && len(k.clientLocks[c]) >= k.cfg.MaxLocksPerClient {
		k.pruneClientLocks(c)
		if len(k.clientLocks[c]) >= k.cfg.MaxLocksPerClient {
			return nil, &LimitError{Name: "max_locks_per_client", Value: uint64(k.cfg.MaxLocksPerClient),
				What: fmt.Sprintf("client %s already uses %d locks at this server (a lock stops counting once the session that used it ends)", c, k.cfg.MaxLocksPerClient)}
		}
	}
	if k.lockRefs[name] == 0 && len(k.lockRefs) >= k.cfg.MaxLocks {
		return nil, &LimitError{Name: "max_locks", Value: uint64(k.cfg.MaxLocks),
			What: fmt.Sprintf("this server has %d locks in use", len(k.lockRefs))}
	}
	lock := k.locks[name]
	if lock == nil {
		lock = activeset.NewLock(name)
		k.locks[name] = lock
	}
	k.noteClientLock(c, name)
	return lock, nil
}

func (k *Core) noteClientLock(c wire.ClientID, name string) {
	m := k.clientLocks[c]
	if m == nil {
		m = make(map[string]struct{})
		k.clientLocks[c] = m
	}
	if _, ok := m[name]; !ok {
		m[name] = struct{}{}
		k.lockRefs[name]++
	}
}

// unused reports whether c has neither a register value nor a
// subscription at lock.
func (k *Core) unused(lock *activeset.Lock, c wire.ClientID) bool {
	subs, _ := lock.SubscriptionsOf(c)
	return lock.Highest(c) == nil && subs == 0
}

// releaseClientLock takes name out of c's locks, and drops the lock itself
// once no client refers to it, unless it has a hw: a lock that ever
// had a Ticket keeps its hw for good (fencing tokens stay monotone, §7).
func (k *Core) releaseClientLock(c wire.ClientID, name string) {
	m := k.clientLocks[c]
	if _, ok := m[name]; !ok {
		return
	}
	delete(m, name)
	if len(m) == 0 {
		delete(k.clientLocks, c)
	}
	k.lockRefs[name]--
	if k.lockRefs[name] > 0 {
		return
	}
	delete(k.lockRefs, name)
	// With no refs, no client has a value or a subscription here (the
	// INVARIANT of Core): only a hw can be left to keep.
	if lock := k.locks[name]; lock != nil && lock.HW() == nil {
		delete(k.locks, name)
	}
}

// releaseIfUnused releases lock for c if a refused request left c nothing
// there: a refused statement (a reset session's, say) must not make the
// server keep a lock or a name for it.
func (k *Core) releaseIfUnused(c wire.ClientID, lock *activeset.Lock) {
	if k.unused(lock, c) {
		k.releaseClientLock(c, lock.Name)
	}
}

// pruneClientLocks releases the locks c no longer uses (a subscription
// that ended, a GetSet it never followed with a statement), so the limit
// counts what c uses now.
func (k *Core) pruneClientLocks(c wire.ClientID) {
	for _, name := range sortedKeys(k.clientLocks[c]) {
		if k.unused(k.locks[name], c) {
			k.releaseClientLock(c, name)
		}
	}
}

// dropSubscriptions ends c's subscriptions (its connection closed) and
// releases the locks where that leaves it nothing.
func (k *Core) dropSubscriptions(c wire.ClientID) {
	for _, name := range sortedKeys(k.clientLocks[c]) {
		lock := k.locks[name]
		lock.Unsubscribe(c)
		k.releaseIfUnused(c, lock)
	}
}

// collect drops c's register values of sessions ≤ upTo, which a reset
// certificate ended (docs/protocol.md change 22): from now on every
// statement of those sessions is refused before any register is looked at
// (accept, handleAnnounce), so the values can never count again; listeners
// and readers are shown the certificate instead. A member that leaves the
// active set this way is pushed to the listeners, as a reset always was.
// The lock's hw is kept (fencing, §7).
func (k *Core) collect(c wire.ClientID, upTo uint64, e *Effects) {
	for _, name := range sortedKeys(k.clientLocks[c]) {
		lock := k.locks[name]
		before := lock.Bytes()
		forgotten, wasMember := lock.ForgetUpTo(c, upTo)
		k.lockChanged(lock, before)
		if wasMember {
			k.holdsDirty[name] = struct{}{}
		}
		if forgotten {
			e.Persist = append(e.Persist, Record{Bucket: bucketStmt, Key: stmtKey(name, c), Delete: true})
			if k.dropJustified(regKey{name, c}) {
				e.Persist = append(e.Persist, Record{Bucket: bucketJust, Key: stmtKey(name, c), Delete: true})
			}
			if wasMember {
				k.sendPushes(lock.ChangedByReset(c, k.mute.Certificate), e)
			}
		}
		if k.unused(lock, c) {
			k.releaseClientLock(c, name)
		}
	}
}

// noteReset remembers that c was just reset, so resync still sends its
// certificate for a while after collect dropped its registers.
func (k *Core) noteReset(c wire.ClientID) {
	if len(k.recentResets) == recentResetsKept {
		k.recentResets = append(k.recentResets[:0], k.recentResets[1:]...)
	}
	k.recentResets = append(k.recentResets, c)
}

// resendOwnVotes sends this server's votes that no certificate has
// settled to every other server again, once per DefaultTTL: a peer that
// already reset the session answers with the certificate (answerLateVote).
// A certificate this server missed (lost on an overflowing queue, say, while
// the peers that formed it restarted) would otherwise come back only at a
// reconnect: the peers collected the client's values (change 22), so no
// resync of theirs carries it. Found by the campaign (seed 1271).
func (k *Core) resendOwnVotes(now time.Time, e *Effects) {
	if now.Sub(k.votesResentAt) < k.cfg.DefaultTTL {
		return
	}
	k.votesResentAt = now
	for _, v := range k.mute.OwnPendingVotes() {
		k.toServers(&wire.Message{Suspect: &v}, e)
	}
}

// compactSettled persists what the detector compacted (change 26): each
// client's certificate gives way to the session it ended.
func (k *Core) compactSettled(now time.Time, e *Effects) {
	for _, st := range k.mute.Compact(now) {
		var up [8]byte
		binary.BigEndian.PutUint64(up[:], st.UpTo)
		e.Persist = append(e.Persist, Record{Bucket: bucketCert, Key: bytesOf(st.Client), Delete: true},
			Record{Bucket: bucketSettled, Key: bytesOf(st.Client), Value: up[:]},
			Record{Bucket: bucketSpoke, Key: bytesOf(st.Client), Delete: true})
	}
}
