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
	// forks: a fake epoch e+1 of servers of its own, by e, signed by the
	// CA that signed the real one and endorsed by the leaked keys of e's
	// members (change 64: their endorsement keys, where a leaked member's
	// files still held its key of e+1, else their signing keys).
	forks map[uint64]wire.Epoch
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
	out = append(out, l.fork(b, byEpoch)...)
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

// fork shows every client and server it knows, for each epoch e whose
// members' keys it holds q of and after which the chain has a real epoch,
// the real epochs up to e and a fake epoch e+1 of servers of its own: what
// an out-of-date client starting from the cluster file would adopt if
// retired keys still endorsed (docs/protocol.md change 64). Every correct
// node refuses it: the World's epochs checker fails the run otherwise.
func (l *leakedKeys) fork(b *Byz, byEpoch map[uint64]map[wire.ServerID]*crypto.PrivateKey) []core.Outgoing {
	if b.CAOf == nil || b.Chain == nil {
		return nil
	}
	ch := b.Chain()
	if ch == nil {
		return nil
	}
	if l.forks == nil {
		l.forks = map[uint64]wire.Epoch{}
	}
	var endorsers map[wire.ServerID]*wire.Endorser
	if b.LeakedEndorsers != nil {
		endorsers = b.LeakedEndorsers()
	}
	var out []core.Outgoing
	for _, e := range sortedEpochs(byEpoch) {
		if e >= ch.Number() {
			continue
		}
		fake, ok := l.forks[e]
		if !ok {
			ca := b.CAOf(e + 1)
			if ca == nil {
				continue
			}
			var err error
			if fake, err = forgeEpoch(b, ch, e, ca, byEpoch[e], endorsers); err != nil {
				continue
			}
			l.forks[e] = fake
		}
		news := &wire.Message{EpochNews: wire.NewsOf(append(ch.Since(0)[:e:e], fake))}
		for _, c := range sortedClientIDs(b.sessions) {
			out = append(out, core.Outgoing{To: wire.ClientPeer(c), Msg: news})
		}
		out = append(out, b.toServers(news)...)
	}
	return out
}

// forgeEpoch signs a fake epoch e+1 of four servers of its own with ca,
// endorsed by held (e's members' keys): by each one's endorsement key of
// e+1 where endorsers still has it, else by its signing key.
func forgeEpoch(b *Byz, ch *wire.Chain, e uint64, ca *crypto.PrivateKey, held map[wire.ServerID]*crypto.PrivateKey, endorsers map[wire.ServerID]*wire.Endorser) (wire.Epoch, error) {
	prev := [32]byte(b.Keys.Cluster)
	if e > 0 {
		prev = wire.EpochHash(ch.Since(e - 1)[0].Signed)
	}
	top := wire.ServerID(0)
	for k := uint64(0); k <= ch.Number(); k++ {
		keys, _, _ := ch.Keyring(k)
		top = max(top, wire.ServerID(len(keys.Servers)))
	}
	body := &wire.EpochBody{Cluster: b.Keys.Cluster, Number: e + 1, Prev: prev, F: 1}
	for i := range 4 {
		k, err := keyFrom(uint64(b.Self)<<32|e, 0xf0c+uint64(i))
		if err != nil {
			return wire.Epoch{}, err
		}
		en, err := endorserFrom(uint64(b.Self)<<32|e, 0xf1c+uint64(i), e+2)
		if err != nil {
			return wire.Epoch{}, err
		}
		ek := en.Keys()
		body.Members = append(body.Members, wire.EpochMember{ID: top + 100 + wire.ServerID(i), Address: "forged.sim:7000", Key: k.Public.Wire, Cert: []byte{0x30}, Endorse: &ek})
	}
	signed, err := wire.SignEpoch(ca, body)
	if err != nil {
		return wire.Epoch{}, err
	}
	fake := wire.Epoch{Signed: signed}
	for _, id := range sortedServerIDs(held) {
		if en := endorsers[id]; en != nil {
			if es, err := en.Clone().Sign(b.Keys.Cluster, id, e+1, signed); err == nil {
				fake.Endorsements = append(fake.Endorsements, es)
				continue
			}
		}
		if es, err := wire.SignEndorsement(held[id], b.Keys.Cluster, id, e+1, signed); err == nil {
			fake.Endorsements = append(fake.Endorsements, es)
		}
	}
	return fake, nil
}

// forkEpoch is leaked-keys' fork alone, for a real faulty process given
// retired members' files (test/cmd/bqserver-byzantine --leaked).
type forkEpoch struct {
	l    leakedKeys
	next time.Time
}

func (*forkEpoch) Name() string                                    { return "fork-epoch" }
func (*forkEpoch) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing { return one(o.To, o.Msg) }

func (f *forkEpoch) Tick(b *Byz) []core.Outgoing {
	if b.Now.Before(f.next) {
		return nil
	}
	f.next = b.Now.Add(50 * time.Millisecond)
	return f.l.fork(b, b.epochKeys())
}
