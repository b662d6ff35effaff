package sim

import (
	"slices"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// Faulty members across a change (docs/protocol.md change 47): a faulty
// copier, whose copy parts lie, and a faulty member that holds the keys of
// every member replaced so far.

// forgeCopy is a member whose copies lie (what issue 43 found with a real
// process): it adds to every Copy part it sends an hw at 2^62−1 of every
// lock it saw, signed by its colluding client, with no J and with the J of
// another lock's Ticket; that client's Ticket of every lock justified by
// another lock's J; a session 2^63 with a TTL of 2^32−1 ms for every client
// it reports, every session's TTL raised to 2^32−1 ms and some marked
// closed, its counters at 2^62; a forged certificate on every session. It
// sends parts out of order now and then, and, once the cluster changed
// again, parts of the first copy it made in place of the new ones.
type forgeCopy struct {
	held       *core.Outgoing // a part held back, sent after the next
	first      []wire.Copy    // the first copy's parts, as the honest core made them
	firstEpoch uint64
}

func (*forgeCopy) Name() string { return "forge-copy" }

func (f *forgeCopy) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing {
	if o.Msg.Copy == nil {
		return one(o.To, o.Msg)
	}
	p := *o.Msg.Copy
	switch {
	case f.first == nil || p.Epoch == f.firstEpoch && len(f.first) < 64 && int(p.Part) == len(f.first)+1:
		f.first, f.firstEpoch = append(f.first, p), p.Epoch
	case p.Epoch > f.firstEpoch && int(p.Part) <= len(f.first) && b.Rand.IntN(3) == 0:
		// An earlier epoch's state, under this one's number.
		old := f.first[p.Part-1]
		old.Epoch, old.Part, old.Last = p.Epoch, p.Part, p.Last
		p = old
	}
	f.forge(b, &p)
	out := one(o.To, &wire.Message{Copy: &p})
	if f.held != nil {
		out, f.held = append(out, *f.held), nil
	} else if !p.Last && b.Rand.IntN(4) == 0 {
		f.held = &out[0]
		return nil
	}
	return out
}

func (f *forgeCopy) forge(b *Byz, p *wire.Copy) {
	p.HW, p.HWJ = slices.Clone(p.HW), slices.Clone(p.HWJ)
	p.Registers, p.Certs = slices.Clone(p.Registers), slices.Clone(p.Certs)
	var otherJ []wire.SignedView // a J of some lock's Ticket: another lock's, for the forgeries
	for _, r := range p.Registers {
		if len(r.J) > 0 {
			otherJ = r.J
			break
		}
	}
	for _, lock := range sortedKeys(b.seen) {
		if ss, ok := b.inflated(lock); ok {
			p.HW = append(p.HW, ss)
			if otherJ != nil {
				p.HWJ = append(p.HWJ, wire.Forward{Statement: ss, J: otherJ})
			}
		}
		if b.Collude != nil && otherJ != nil {
			h := wire.JustificationHash(otherJ)
			tk, err := wire.SignStatement(b.Collude, b.Keys.Cluster, &wire.Statement{Lock: lock, Client: wire.ClientID(b.Collude.Public.ID),
				Session: 1, Attempt: 1, Phase: wire.PhaseTicket, N: 1, JHash: &h})
			if err == nil {
				p.Registers = append(p.Registers, wire.Forward{Statement: tk, J: otherJ})
			}
		}
	}
	clients := make([]wire.CopyClient, 0, len(p.Clients))
	for _, cc := range p.Clients {
		sessions := make([]wire.CopySession, 0, len(cc.Sessions)+1)
		for _, s := range cc.Sessions {
			s.TTLMillis = 1<<32 - 1
			s.Closed = s.Closed || b.Rand.IntN(3) == 0
			sessions = append(sessions, s)
		}
		cc.Sessions = append(sessions, wire.CopySession{Session: 1 << 63, TTLMillis: 1<<32 - 1})
		cc.SpokeUpTo, cc.ResetUpTo = 1<<62, 1<<62
		clients = append(clients, cc)
		if cert, ok := b.forgedCert(cc.Client, b.sessions[cc.Client]); ok {
			p.Certs = append(p.Certs, cert)
		}
	}
	p.Clients = clients
}

// leakedKeys is a faulty member that holds the signing keys of every member
// replaced or removed so far, each once every correct member of the epoch
// that left it out serves that epoch (the assumption of change 47: keys may
// leak from then on). With them it signs, for each epoch where it holds q of
// its members' keys, votes on the session of every client it saw — the
// certificates they make go to the servers, to the clients in its Updates
// and ReadReplies, and into its copies — and a J of Views of that epoch for
// its colluding client's Ticket with N = 1 on every lock, forwarded and
// copied, and evidence that the Ticket of every client it saw is
// unjustified, with such a J. None of it may count anywhere.
type leakedKeys struct {
	next  time.Time
	certs map[wire.ClientID][]wire.ResetCertificate // the latest made for each client
	forms []wire.Forward                            // the latest forged Tickets
}

func (*leakedKeys) Name() string { return "leaked-keys" }

// epochKeys are, for each epoch whose members' keys this server holds q of
// (its own among them if it is a member), those keys by member id.
func (b *Byz) epochKeys() map[uint64]map[wire.ServerID]*crypto.PrivateKey {
	if b.Chain == nil || b.Leaked == nil {
		return nil
	}
	ch := b.Chain()
	if ch == nil {
		return nil
	}
	leaked := b.Leaked()
	out := map[uint64]map[wire.ServerID]*crypto.PrivateKey{}
	for e := uint64(0); e <= ch.Number(); e++ {
		keys, q, ok := ch.Keyring(e)
		if !ok {
			continue
		}
		held := map[wire.ServerID]*crypto.PrivateKey{}
		for i, k := range keys.Servers {
			id := wire.ServerID(i)
			switch {
			case k == nil:
			case id == b.Self && k.Wire.Fingerprint() == b.Key.Public.Wire.Fingerprint():
				held[id] = b.Key
			case leaked[id] != nil && k.Wire.Fingerprint() == leaked[id].Public.Wire.Fingerprint():
				held[id] = leaked[id]
			}
		}
		if len(held) >= q {
			out[e] = held
		}
	}
	return out
}

func (l *leakedKeys) Tick(b *Byz) []core.Outgoing {
	if b.Now.Before(l.next) {
		return nil
	}
	l.next = b.Now.Add(suspectResend)
	byEpoch := b.epochKeys()
	if len(byEpoch) == 0 {
		return nil
	}
	l.certs, l.forms = map[wire.ClientID][]wire.ResetCertificate{}, nil
	var out []core.Outgoing
	for _, e := range sortedEpochs(byEpoch) {
		held := byEpoch[e]
		for _, c := range sortedClientIDs(b.sessions) {
			cert := wire.ResetCertificate{Client: c, Session: b.sessions[c]}
			for _, id := range sortedServerIDs(held) {
				v, err := wire.SignSuspect(held[id], b.Keys.Cluster, &wire.SuspectBody{Client: c, Session: cert.Session, Server: id, Reason: wire.SuspectMute, Epoch: e})
				if err != nil {
					return out
				}
				cert.Votes = append(cert.Votes, v)
			}
			l.certs[c] = append(l.certs[c], cert)
			out = append(out, b.toMembers(&wire.Message{Reset: &cert})...)
		}
		if b.Collude == nil {
			continue
		}
		colluder := wire.ClientID(b.Collude.Public.ID)
		for _, lock := range sortedKeys(b.seen) {
			j := b.leakedJ(held, e, lock, colluder)
			h := wire.JustificationHash(j)
			tk, err := wire.SignStatement(b.Collude, b.Keys.Cluster, &wire.Statement{Lock: lock, Client: colluder, Session: 1, Attempt: 1, Phase: wire.PhaseTicket, N: 1, JHash: &h})
			if err != nil {
				continue
			}
			f := wire.Forward{Statement: tk, J: j}
			l.forms = append(l.forms, f)
			out = append(out, b.toMembers(&wire.Message{Forward: &f})...)
			// Evidence that a correct client's Ticket is unjustified, with
			// a J the leaked keys made for it: its signed H(J) refuses it.
			for _, c := range sortedClientIDs(b.seen[lock]) {
				for _, s := range b.seen[lock][c] {
					if s.st.Phase == wire.PhaseTicket && c != colluder {
						fj := b.leakedJ(held, e, lock, c)
						out = append(out, b.toMembers(&wire.Message{Evidence: &wire.Evidence{Kind: wire.EvidenceInvalidTicket, A: s.ss, J: fj}})...)
						break
					}
				}
			}
		}
	}
	return out
}

// leakedJ is a J of epoch e for c's attempt (1, 1) on lock: one empty View
// by each held key.
func (b *Byz) leakedJ(held map[wire.ServerID]*crypto.PrivateKey, e uint64, lock string, c wire.ClientID) []wire.SignedView {
	var j []wire.SignedView
	for _, id := range sortedServerIDs(held) {
		v, err := wire.SignView(held[id], b.Keys.Cluster, &wire.ViewBody{Lock: lock, For: c, ForSession: 1, ForAttempt: 1, Server: id, Epoch: e})
		if err == nil {
			j = append(j, v)
		}
	}
	return j
}

func (l *leakedKeys) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing {
	if p := o.Msg.Copy; p != nil && (len(l.certs) > 0 || len(l.forms) > 0) {
		q := *p
		q.Certs, q.Registers = slices.Clone(q.Certs), slices.Clone(q.Registers)
		for _, c := range sortedClientIDs(l.certs) {
			q.Certs = append(q.Certs, l.certs[c]...)
		}
		q.Registers = append(q.Registers, l.forms...)
		return one(o.To, &wire.Message{Copy: &q})
	}
	if !o.To.IsClient || len(l.certs) == 0 {
		return one(o.To, o.Msg)
	}
	return b.withResets(o, func(c wire.ClientID, _ uint64) []wire.ResetCertificate { return l.certs[c] }, func() bool { return false })
}

// toMembers sends m to every other server of the newest epoch and the one
// before it (every other server of the run without changes).
func (b *Byz) toMembers(m *wire.Message) []core.Outgoing {
	if b.Chain == nil || b.Chain() == nil || b.Chain().Number() == 0 {
		return b.toServers(m)
	}
	ch := b.Chain()
	ids := map[wire.ServerID]bool{}
	for _, e := range []uint64{ch.Number() - 1, ch.Number()} {
		keys, _, _ := ch.Keyring(e)
		for i, k := range keys.Servers {
			if k != nil && wire.ServerID(i) != b.Self {
				ids[wire.ServerID(i)] = true
			}
		}
	}
	var out []core.Outgoing
	for _, id := range sortedServerIDs(ids) {
		out = append(out, core.Outgoing{To: wire.ServerPeer(id), Msg: m})
	}
	return out
}

func sortedEpochs[V any](m map[uint64]V) []uint64 {
	out := make([]uint64, 0, len(m))
	for e := range m {
		out = append(out, e)
	}
	slices.Sort(out)
	return out
}

func sortedServerIDs[V any](m map[wire.ServerID]V) []wire.ServerID {
	out := make([]wire.ServerID, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
