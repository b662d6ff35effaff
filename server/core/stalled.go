package core

import (
	"github.com/bq-lock/bq/wire"
)

// Clients on probation (docs/protocol.md change 33). A reset certificate
// that ends a session in which the client never spoke to this server — it
// never opened, heartbeat or sent a statement in it here; the server knew it
// from other servers only — puts the client on probation: from then on this
// server takes a statement of a newer session of it from another server (a
// Forward, or an Announce it would pull) only if the client spoke in that
// session here, or f+1 servers voted on it; and it drops, at once, what it
// already took of such sessions. Otherwise a faulty server could feed the
// correct servers, one after another, Doorways that a silent client signed
// in advance for sessions 2, 3, 4, …, each stalling every waiter on the lock
// for a lease, for as long as the supply lasts. A client's own statements,
// sent to this server directly, are never affected.

// maxStalled bounds the clients on probation; past it the oldest is
// forgotten (it may then stall a lock once more, as a client never reset).
const maxStalled = 16384

// probation puts c on probation after a certificate ending its sessions up
// to upTo, one of which it never spoke in here, and drops the statements of
// its newer sessions that this server took from others (c never spoke in
// them here either: it spoke in none above upTo).
func (k *Core) probation(c wire.ClientID, upTo uint64, e *Effects) {
	k.onProbation(c, upTo)
	for _, name := range sortedKeys(k.clientLocks[c]) {
		lock := k.locks[name]
		en := lock.Highest(c)
		if en == nil || en.St.Session <= upTo || en.St.Phase == wire.PhaseExit || k.mute.SpokeUpTo(c) >= en.St.Session {
			continue
		}
		before := lock.Bytes()
		wasMember := lock.Forget(c)
		k.lockChanged(lock, before)
		k.Stats.ForwardsRefused++
		e.Persist = append(e.Persist, Record{Bucket: bucketStmt, Key: stmtKey(name, c), Delete: true})
		if k.dropJustified(regKey{name, c}) {
			e.Persist = append(e.Persist, Record{Bucket: bucketJust, Key: stmtKey(name, c), Delete: true})
		}
		if wasMember {
			k.holdsDirty[name] = struct{}{}
			k.sendPushes(lock.Changed(c, k.mute.Certificate), e)
		}
		if k.unused(lock, c) {
			k.releaseClientLock(c, name)
		}
	}
}

// onProbation records that c is on probation above session upTo.
func (k *Core) onProbation(c wire.ClientID, upTo uint64) {
	if _, ok := k.stalled[c]; !ok {
		if len(k.stalledOrder) >= maxStalled {
			delete(k.stalled, k.stalledOrder[0])
			k.stalledOrder = k.stalledOrder[1:]
		}
		k.stalledOrder = append(k.stalledOrder, c)
	}
	k.stalled[c] = max(k.stalled[c], upTo)
}

// forwardRefused reports whether a statement of client c's session sess
// that reached this server from another server must be left out: c is on
// probation, and it never spoke in that session here, nor did f+1 servers
// vote on it. An Exit only removes, so it is always taken.
func (k *Core) forwardRefused(c wire.ClientID, sess uint64, phase wire.Phase) bool {
	upTo, ok := k.stalled[c]
	return ok && phase != wire.PhaseExit && sess > upTo && k.mute.SpokeUpTo(c) < sess &&
		k.mute.VoteCount(c, sess) <= k.cfg.F && !noProbation()
}

// showProbation hands server s what put c on probation here — its newest
// certificate, or, once compacted (change 26), this server's vote on the
// session it settled — when s forwarded, announced or voted on a newer
// session of c that this server will not take. A server that took such a
// session alone (it was down when the earlier ones were reset) would
// otherwise hold it for ever: no other correct server takes it, so no
// certificate can end it. With this one, s puts c on probation too and drops
// what it took.
func (k *Core) showProbation(s wire.ServerID, c wire.ClientID, e *Effects) {
	if cert := k.mute.Certificate(c); cert != nil {
		e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: &wire.Message{Reset: cert}})
	} else if v, ok := k.mute.SignSettled(c, k.stalled[c]); ok {
		e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: &wire.Message{Suspect: &v}})
	}
}
