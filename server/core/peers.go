package core

import (
	"sort"
	"time"

	"github.com/bq-lock/bq/activeset"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/detector"
	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// Server-to-server dissemination (docs/protocol.md §3.5, changes 5, 11 and
// 22): forwards, announcements and pulls of statements, votes, certificates,
// evidence and revocations, and the resync of a peer that (re)connects.

func (k *Core) fromServer(now time.Time, s wire.ServerID, m *wire.Message, e *Effects) {
	if k.conflictServer(s, e) {
		return
	}
	if m.EpochNews != nil {
		_ = k.onEpochNews(now, m.EpochNews, e) // a faulty server's garbage changes nothing
		return
	}
	if m.Copy != nil {
		k.onCopy(now, s, m.Copy, e)
		return
	}
	if m.CopyRequest != nil {
		k.serveCopy(now, s, m.CopyRequest, e)
		return
	}
	if m.Endorse != nil {
		_ = k.onEndorse(now, wire.ServerPeer(s), m.Endorse, e) // a faulty server's garbage changes nothing
		return
	}
	if k.sealedServer(s, m, e) {
		return
	}
	if k.cfg.Keys.Key(s) == nil {
		// No member of the epoch this server serves — a removed member
		// still in an older one, or a new one of an epoch not known here
		// yet: past the epochs and the copy above, it moves nothing
		// (change 43, "a removed member is no peer").
		k.Stats.FromNonMembers++
		return
	}
	if a := m.Announce; a != nil && !a.Want && len(a.Items) == 0 {
		// A peer that just copied its way into this server's epoch
		// (copier.go): show it what this server took while it was
		// copying, which it dropped (change 43).
		if at, ok := k.servesSaid[s]; !ok || now.Sub(at) >= copyRetry/2 {
			k.servesSaid[s] = now
			k.resync(s, e)
		}
		return
	}
	switch {
	case m.Forward != nil:
		st, err := k.verify(&m.Forward.Statement)
		if err != nil {
			return // a faulty server relayed garbage; nothing to do
		}
		if k.forwardRefused(st.Client, st.Session, st.Phase) {
			k.Stats.ForwardsRefused++
			k.showProbation(s, st.Client, e) // a session of a client on probation (change 33)
			return
		}
		lock, err := k.lockFor(st.Client, st.Lock)
		if err != nil {
			return
		}
		k.accept(now, lock, st, m.Forward.Statement, m.Forward.J, fromPeer, k.servedJ(), e)
		k.releaseIfUnused(st.Client, lock)
	case m.Announce != nil && m.Announce.Want:
		k.handleWant(s, m.Announce, e)
	case m.Announce != nil:
		k.handleAnnounce(s, m.Announce, e)
	case m.Suspect != nil:
		if !k.addVote(now, *m.Suspect, e) {
			k.answerLateVote(s, m.Suspect, e)
		}
	case m.Reset != nil:
		k.applyCert(m.Reset, e)
	case m.Evidence != nil:
		keys, q, _ := k.keysForJ(m.Evidence.J, k.anyJ()) // evidence convicts only by its client's own signatures (change 47)
		c, err := detector.CheckEvidence(m.Evidence, keys, q, k.verify)
		if err == nil && (len(k.banned) < k.cfg.MaxBans || k.knows(c)) {
			// A faulty server can make evidence against identities it makes
			// up itself: past MaxBans, only clients known here are banned.
			k.ban(c, m.Evidence, e)
		}
	case m.Revoke != nil:
		_ = k.onRevoke(m.Revoke.Revocation, e) // a faulty server's garbage changes nothing
	}
}

// noteAnnounce queues a newly accepted statement for the next Announce
// (§3.5, docs/protocol.md change 11). The client sent it to every server
// itself, so on the common path the peers already hold it and the Announce
// costs one reference per statement instead of a Forward (with J) per
// server; a peer that lacks it asks, and gets it from handleWant.
func (k *Core) noteAnnounce(now time.Time, ref wire.StatementRef, e *Effects) {
	if noAnnounce() || k.sealed() {
		return
	}
	if len(k.announce) == 0 {
		k.announceSince = now
	}
	k.announce = append(k.announce, ref)
	k.Stats.Announced++
	if len(k.announce) >= wire.MaxAnnounceItems {
		k.flushAnnounce(e)
	}
}

// flushAnnounce sends the queued references to every other server.
func (k *Core) flushAnnounce(e *Effects) {
	m := &wire.Message{Announce: &wire.Announce{Items: k.announce}}
	k.announce = nil
	for _, s := range k.peers() {
		e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: m})
	}
}

// handleAnnounce asks s for every announced statement this server lacks: one
// newer than the register's value here, or one with the same timestamp and
// another body (which the Forward will then show as equivocation). The
// references are unsigned hints: a faulty server can only make this server
// ask it for something, which costs one message.
func (k *Core) handleAnnounce(s wire.ServerID, a *wire.Announce, e *Effects) {
	k.askFor(s, k.lacking(s, a.Items, e), e)
}

// askFor sends s a Want for refs and remembers them (change 35).
func (k *Core) askFor(s wire.ServerID, want []wire.StatementRef, e *Effects) {
	if len(want) == 0 {
		return
	}
	k.Stats.Pulled += uint64(len(want))
	e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: &wire.Message{Announce: &wire.Announce{Want: true, Items: want}}})
	if k.wanted == nil {
		k.wanted = make(map[wire.ServerID][]wire.StatementRef)
	}
	w := append(k.wanted[s], want...)
	if over := len(w) - wire.MaxAnnounceItems; over > 0 {
		w = append([]wire.StatementRef(nil), w[over:]...)
	}
	k.wanted[s] = w
}

// askAgain asks s once more for what this server asked it for and still
// lacks: the Want may have been lost (change 35). Called by resync.
func (k *Core) askAgain(s wire.ServerID, e *Effects) {
	w := k.wanted[s]
	delete(k.wanted, s)
	k.askFor(s, k.lacking(s, w, e), e)
}

// lacking is the references among refs to statements this server lacks:
// one newer than the register's value here, or one with the same
// timestamp and another body (which the Forward will then show as
// equivocation). It skips banned clients, reset sessions and what
// probation refuses (showing s the probation instead).
func (k *Core) lacking(s wire.ServerID, refs []wire.StatementRef, e *Effects) []wire.StatementRef {
	var want []wire.StatementRef
	shown := make(map[wire.ClientID]bool)
	for _, ref := range refs {
		c := ref.Client
		if k.banned[c] != nil || ref.Session <= k.mute.ResetUpTo(c) {
			continue
		}
		if k.forwardRefused(c, ref.Session, ref.Phase) {
			if !shown[c] {
				shown[c] = true
				k.showProbation(s, c, e)
			}
			continue
		}
		if lock := k.locks[ref.Lock]; lock != nil {
			if en := lock.Highest(c); en != nil {
				cmp := quorum.Timestamp{Session: ref.Session, Attempt: ref.Attempt, Phase: ref.Phase}.Compare(quorum.TimestampOf(en.St))
				if cmp < 0 || (cmp == 0 && wire.BodyHash(&en.Signed) == ref.BodyHash) {
					continue
				}
			}
		}
		want = append(want, ref)
	}
	return want
}

// handleWant answers s's request with the current register value of each
// named (lock, client): a Ticket with its J, a Held after its Ticket.
func (k *Core) handleWant(s wire.ServerID, a *wire.Announce, e *Effects) {
	for _, ref := range a.Items {
		for _, m := range k.registerForwards(ref.Lock, ref.Client) {
			k.Stats.Forwards++
			e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: m})
		}
	}
}

// canForward reports whether registerForwards has something to send for
// c's register value en on the lock named name.
func (k *Core) canForward(name string, c wire.ClientID, en *activeset.Entry) bool {
	switch en.St.Phase {
	case wire.PhaseTicket, wire.PhaseHeld:
		_, ok := k.justified[regKey{name, c}]
		return ok
	}
	return true
}

// registerForwards is the register value of c for the lock named name as
// Forwards a peer can accept on its own: nothing for a void value or none, a
// Ticket with its J, a Held after its Ticket (with J), any other statement
// alone. A Ticket without its J (one restored from a disk written before J
// was persisted) is not sent.
func (k *Core) registerForwards(name string, c wire.ClientID) []*wire.Message {
	lock := k.locks[name]
	if lock == nil {
		return nil
	}
	en := lock.Highest(c)
	if en == nil || !k.canForward(name, c, en) {
		return nil
	}
	switch en.St.Phase {
	case wire.PhaseTicket, wire.PhaseHeld:
		jt := k.justified[regKey{name, c}] // present: canForward checked it
		out := []*wire.Message{{Forward: &wire.Forward{Statement: jt.ticket, J: jt.j}}}
		if en.St.Phase == wire.PhaseHeld {
			out = append(out, &wire.Message{Forward: &wire.Forward{Statement: en.Signed}})
		}
		return out
	}
	return []*wire.Message{{Forward: &wire.Forward{Statement: en.Signed}}}
}

// resync sends a server whose channel just came (back) up what it may have
// missed while it was down or cut off: a reference to the register value of
// every client here that no reset voids, which the peer pulls if it lacks it
// (a Ticket with its J, a Held after its Ticket), and every vote
// that no certificate has settled yet (its own may have been lost on the way
// out), and the evidence of every ban. Without it, a statement, vote or
// evidence forwarded while the peer was away is never seen there, and a silent client that only one correct server
// heard of, or an Exit that one correct server missed, blocks the lock.
func (k *Core) resync(s wire.ServerID, e *Effects) {
	k.sendRevocations(s, e)
	send := func(m *wire.Message) { e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: m}) }
	clients := make([]wire.ClientID, 0, len(k.clientLocks))
	for c := range k.clientLocks {
		clients = append(clients, c)
	}
	sort.Slice(clients, func(i, j int) bool { return clients[i].Less(clients[j]) })
	// Register values go as references (change 11): the peer pulls only
	// what it lacks, so a reconnect costs a reference per register, not a
	// Forward (with J) per register.
	var refs []wire.StatementRef
	for _, c := range clients {
		for _, name := range sortedKeys(k.clientLocks[c]) {
			if en := k.locks[name].Highest(c); en != nil && k.canForward(name, c, en) {
				refs = append(refs, wire.RefOf(en.St, &en.Signed))
			}
			if len(refs) == wire.MaxAnnounceItems {
				send(&wire.Message{Announce: &wire.Announce{Items: refs}})
				refs = nil
			}
		}
	}
	if len(refs) > 0 {
		send(&wire.Message{Announce: &wire.Announce{Items: refs}})
	}
	k.askAgain(s, e)
	for _, v := range k.mute.PendingVotes() {
		send(&wire.Message{Suspect: &v})
	}
	// The certificate of every client this server still holds registers of:
	// a peer that missed it (a full send queue, core.Repair) would keep the
	// void statements, and no later vote of its own brings it (it may have
	// voted before the certificate formed). Found by the simulator
	// (test/sim, an overflow toward s0 while c3's certificate went round).
	// And of the clients reset lately whose registers the certificate
	// collected here (change 22), which no longer appear in clientLocks.
	listed := make(map[wire.ClientID]bool, len(clients))
	for _, c := range clients {
		listed[c] = true
	}
	for _, c := range k.recentResets {
		if !listed[c] {
			listed[c] = true
			clients = append(clients, c)
		}
	}
	for _, c := range clients {
		if cert := k.mute.Certificate(c); cert != nil {
			send(&wire.Message{Reset: cert})
		}
	}
	// Evidence goes round once too: a peer that was down or cut off while it
	// did never banned the client (found by the simulator, test/sim seed 34
	// of the campaign; docs/protocol.md, Changes from the design 9).
	banned := make([]wire.ClientID, 0, len(k.banned))
	for c := range k.banned {
		banned = append(banned, c)
	}
	sort.Slice(banned, func(i, j int) bool { return banned[i].Less(banned[j]) })
	for _, c := range banned {
		send(&wire.Message{Evidence: k.banned[c]})
	}
}

// answerLateVote answers a vote on a session this server already reset with
// the certificate: the voter missed it.
func (k *Core) answerLateVote(s wire.ServerID, v *wire.SignedSuspect, e *Effects) {
	var body wire.SuspectBody
	if crypto.Unmarshal(v.Signed.Body, &body) != nil {
		return
	}
	if upTo, ok := k.stalled[body.Client]; ok && body.Session > upTo && k.mute.SpokeUpTo(body.Client) < body.Session {
		k.showProbation(s, body.Client, e) // change 33
		return
	}
	if body.Session > k.mute.ResetUpTo(body.Client) {
		return
	}
	if cert := k.mute.Certificate(body.Client); cert != nil && cert.Epoch() == k.cfg.Keys.Epoch {
		e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: &wire.Message{Reset: cert}})
	} else if v, ok := k.mute.SignSettled(body.Client, body.Session); ok {
		// The certificate was compacted (change 26), or is of an earlier
		// epoch, which the peer does not take (change 47): vote instead,
		// in the epoch served, so the peer gets q votes, a certificate of
		// its own.
		e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: &wire.Message{Suspect: &v}})
	}
}

func (k *Core) toServers(m *wire.Message, e *Effects) {
	for _, s := range k.peers() {
		k.Stats.Forwards++
		e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: m})
	}
}
