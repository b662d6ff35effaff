package sim

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// Membership changes in the simulator (docs/protocol.md change 43). With
// Scenario.Replace the run has a cluster CA: every core gets it as
// core.Config.ClusterCA and every correct client as
// bakery.ClientConfig.ClusterCA (epoch 0's bytes are those of a run without
// one). At each change's At the operator signs the next epoch — the members
// of the one before, less the one a replace or remove takes out, plus the
// one a replace or add brings in under the next id never used; f as it was,
// but at an add or remove f follows n; a CA rotation keeps the members and
// names the next cluster CA, which signs every later epoch — starts the new
// member's core with
// epoch 0's keyring, its own key and the signed epochs (as `bqserver server
// replace` writes its files), and pushes the epochs to every server as a
// client message of its own identity, with a network delay; it pushes again
// to each server that does not know the epoch every pushRetry, until q of
// the old epoch sealed it and q of the new serve it (as the command waits).
// Servers tell each other; clients learn the epoch only from the servers.
// The removed member keeps running: it seals and hands out its state, or,
// made faulty by the change, keeps talking with its old key (its behaviours)
// or never adopts the new epoch at all (RemovedStays).
//
// What the checkers make of a change (each says so where it runs):
//   - mutual-exclusion, fencing, register-regularity, getset, reset,
//     durability, bounded-memory, one-signer-ticket, correct-never-banned:
//     unchanged, over every correct server ever started (a removed member's
//     state is frozen, and still must never break them).
//   - fcfs, liveness, quorum-accesses: an attempt not yet holding that its
//     client starts over in the new epoch (a new attempt number, the
//     bakery's rule) continues the Lock call: the new attempt inherits its
//     start; the old one's Ticketed is void (the move costs it its place in
//     line), so fcfs reads only the new attempt's.
//   - Exits complete at q_e acks of the members of one epoch e.
//   - reset (silent clients), caught-or-harmless, drip-bounded: over the
//     correct members of the newest epoch only (a removed member runs out
//     no lease: its frozen state is handed on, not acted on), each counted
//     from the later of its usual start and the moment that member began
//     serving the epoch (the copy restarts every lease and clock there); a
//     member still copying is checked again later.
//   - liveness also requires, at the end, every correct member of the
//     newest epoch that is up to serve it, and every live correct client to
//     know it.

// pushRetry is how often the operator pushes an epoch again to a server
// that does not know it yet, until its command would be done.
const pushRetry = 300 * time.Millisecond

// checkChanges refuses a scenario whose changes the world cannot make, or
// whose epochs hold more than f faulty members (f of each epoch: f follows n
// at an add or a remove, as certs.PlanChange makes it). A member that turns
// faulty at a change counts in every epoch it was a member of: a later
// change may come before anyone served an earlier epoch, whose copy then
// still reads that member's report (the assumption of change 47 holds each
// epoch's f until the next is served).
func (w *World) checkChanges() error {
	sc := &w.sc
	if len(sc.Replace) == 0 {
		return nil
	}
	members := make([]int, sc.N)
	for i := range members {
		members[i] = i
	}
	faulty := func(s int) bool {
		if sc.IsByzantine(s) {
			return true
		}
		for k, rc := range sc.Replace {
			if id, ok := sc.newMemberID(k); ok && id == s && len(rc.NewByzantine) > 0 {
				return true
			}
		}
		return false
	}
	everFaulty := func(s int) bool {
		if faulty(s) {
			return true
		}
		for _, rc := range sc.Replace {
			if rc.Server == s && rc.removedFaulty() {
				return true
			}
		}
		return false
	}
	f := sc.F
	epochs, fs := [][]int{}, []int{}
	for k, rc := range sc.Replace {
		epochs, fs = append(epochs, slices.Clone(members)), append(fs, f)
		if k > 0 && rc.At < sc.Replace[k-1].At {
			return fmt.Errorf("sim: changes out of order (%s before %s)", sc.Replace[k-1], rc)
		}
		if rc.removes() && !slices.Contains(members, rc.Server) {
			return fmt.Errorf("sim: %s: s%d is no member then", rc, rc.Server)
		}
		for _, names := range [][]string{rc.NewByzantine, rc.RemovedByzantine} {
			for _, b := range names {
				if _, err := NewBehavior(b); err != nil {
					return err
				}
			}
		}
		bad := 0
		for _, s := range members {
			if faulty(s) || s == rc.Server && rc.removedFaulty() {
				bad++
			}
		}
		if bad > f {
			return fmt.Errorf("sim: %s: %d faulty members in the epoch it leaves, f=%d", rc, bad, f)
		}
		if rc.removes() {
			members = slices.DeleteFunc(members, func(s int) bool { return s == rc.Server })
		}
		if id, ok := sc.newMemberID(k); ok {
			members = append(members, id)
		}
		if rc.Kind == ChangeAdd || rc.Kind == ChangeRemove {
			f = quorum.MaxFaults(len(members))
		}
		if len(members) < 4 {
			return fmt.Errorf("sim: %s: %d members left; the simulator keeps n ≥ 4", rc, len(members))
		}
	}
	bad := 0
	for _, s := range members {
		if faulty(s) {
			bad++
		}
	}
	if bad > f {
		return fmt.Errorf("sim: %d faulty members in the last epoch, f=%d", bad, f)
	}
	for e, ms := range epochs {
		bad := 0
		for _, s := range ms {
			if everFaulty(s) {
				bad++
			}
		}
		if bad > fs[e] {
			return fmt.Errorf("sim: epoch %d has %d members faulty at some time, f=%d", e, bad, fs[e])
		}
	}
	return nil
}

// membersAfter is the members after every change of sc, the faulty ones
// among every server ever (faulty from the start, or new and faulty), and
// the last epoch's f: what checkChanges walks through.
func (sc *Scenario) membersAfter() (members []int, faulty map[int]bool, f int) {
	faulty = map[int]bool{}
	for _, z := range sc.Byzantine {
		faulty[z.Server] = true
	}
	for s := range sc.N {
		members = append(members, s)
	}
	f = sc.F
	for k, rc := range sc.Replace {
		if rc.removes() {
			members = slices.DeleteFunc(members, func(s int) bool { return s == rc.Server })
		}
		if id, ok := sc.newMemberID(k); ok {
			members = append(members, id)
			if len(rc.NewByzantine) > 0 {
				faulty[id] = true
			}
		}
		if rc.Kind == ChangeAdd || rc.Kind == ChangeRemove {
			f = quorum.MaxFaults(len(members))
		}
	}
	return members, faulty, f
}

// setupChanges makes the cluster CA and the chain of a run with changes,
// from streams of their own (no other key of the run changes).
func (w *World) setupChanges() error {
	if len(w.sc.Replace) == 0 {
		return nil
	}
	ca, err := keyFrom(w.sc.Seed, 0x43ca)
	if err != nil {
		return err
	}
	w.clusterCA, w.epochSigner = ca, ca
	if w.ca == nil {
		// An open run's operator key (change 65), from a stream of its
		// own: its members endorse only what it approved.
		if w.operator, err = keyFrom(w.sc.Seed, 0x0a99); err != nil {
			return err
		}
	}
	// Every first member's endorsement keys (change 64), named in epoch
	// 0's keyring, as bqserver init writes them in the cluster file.
	w.keys.Endorse = make([]*wire.EndorseKeys, len(w.srv))
	for i, s := range w.srv {
		if s.endorser, err = endorserFrom(w.sc.Seed, 0xe2d0+uint64(i), 1); err != nil {
			return err
		}
		k := s.endorser.Keys()
		w.keys.Endorse[i] = &k
	}
	w.chain = wire.NewChain(ca.Public, w.sc.F, w.keys)
	return nil
}

// simEndorseLeaves is how many epochs a simulated member can endorse: more
// than a run's changes.
const simEndorseLeaves = 32

// endorserFrom makes endorsement keys from the seed's stream named by
// stream, for a member whose first endorsed epoch is first.
func endorserFrom(seed, stream, first uint64) (*wire.Endorser, error) {
	return wire.NewEndorser(rand.NewChaCha8([32]byte(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(make([]byte, 16), seed), stream))), first, simEndorseLeaves)
}

// keyFrom makes a signing key from the seed's stream named by stream.
func keyFrom(seed, stream uint64) (*crypto.PrivateKey, error) {
	r := rand.New(rand.NewPCG(seed, stream))
	b := make([]byte, 32)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return crypto.PrivateKeyFromSeed(crypto.Ed25519, b)
}

// serverConfig is the core configuration of server s: of epoch 0, as every
// server of the run starts (a new member gets the epochs on top).
func (w *World) serverConfig(s *simServer) core.Config {
	sc := &w.sc
	cfg := core.DefaultConfig(s.id, sc.N, sc.F, w.keys, s.key)
	cfg.DefaultTTL = sc.TTL
	if sc.ServerTTL > 0 {
		cfg.DefaultTTL = sc.ServerTTL
	}
	cfg.DoorwayDeadline = sc.DoorwayDeadline
	cfg.MaxHold = sc.MaxHold
	if w.ca != nil {
		cfg.ClientCA = w.ca.Public
	}
	if w.operator != nil {
		cfg.Approver = w.operator.Public
	}
	if sc.MaxLockMembers > 0 {
		cfg.MaxLockMembers = sc.MaxLockMembers
	}
	cfg.VerifyCacheSize = 4096
	if sc.Vary != nil {
		cfg.CopyPartBytes = sc.Vary.CopyPartBytes
	}
	if w.clusterCA != nil {
		cfg.ClusterCA = w.clusterCA.Public
	}
	cfg.Endorser = s.endorser
	return cfg
}

// scheduleChanges puts the scenario's changes in the queue.
func (w *World) scheduleChanges() {
	for k, rc := range w.sc.Replace {
		w.At(rc.At, func() { w.replace(k, rc) })
	}
}

// epochNumber is the newest epoch the operator signed (0 without changes).
func (w *World) epochNumber() uint64 {
	if w.chain == nil {
		return 0
	}
	return w.chain.Number()
}

// memberOf reports whether server i is a member of epoch e.
func (w *World) memberOf(i int, e uint64) bool {
	if w.chain == nil {
		return i < w.sc.N
	}
	keys, _, ok := w.chain.Keyring(e)
	return ok && keys.Key(wire.ServerID(i)) != nil
}

// member reports whether server i is a member of the newest epoch signed.
func (w *World) member(i int) bool { return w.memberOf(i, w.epochNumber()) }

// servesNewest reports whether server i is up and serves the newest epoch
// signed.
func (w *World) servesNewest(i int) bool {
	s := w.srv[i]
	if !s.up {
		return false
	}
	serves, _ := s.core.Epoch()
	return serves == w.epochNumber()
}

// knows reports whether server i is up and knows epoch e.
func (w *World) knows(i int, e uint64) bool {
	s := w.srv[i]
	if !s.up {
		return false
	}
	_, knows := s.core.Epoch()
	return knows >= e
}

// activeFrom is since when server i's leases and clocks run as they are:
// when it began serving the epoch it serves (0 for epoch 0).
func (w *World) activeFrom(i int) time.Duration { return w.servedAt[i] }

// pendingChange is a change the operator proposed (change 49): it counts
// once q members of the epoch before endorsed it and one of them adopted it.
type pendingChange struct {
	k        int
	rc       ReplaceChange
	e        uint64
	id       int                // the new member, if the change adds one
	key      *crypto.PrivateKey // its key
	endorser *wire.Endorser     // its endorsement keys
	endorse  *wire.Endorse
}

// replace makes the k-th change, as the operator's command does: it signs
// the next epoch with the CA in force, approves it with the client CA (a
// closed run's) or the operator key (an open run's, change 65), makes the removed member faulty if the change says so,
// and shows the proposal to every server until one adopted it (propose;
// followAdopted then completes the change). One change at a time, in
// order: a change due while another is pending, or before the one ahead of
// it started, waits.
func (w *World) replace(k int, rc ReplaceChange) {
	if w.pending != nil || k != w.changesMade {
		w.after(pushRetry, func() { w.replace(k, rc) })
		return
	}
	w.changesMade++
	id, adds := w.sc.newMemberID(k)
	e := w.chain.Number() + 1
	var key *crypto.PrivateKey
	var endorser *wire.Endorser
	if adds {
		var err error
		if key, err = keyFrom(w.sc.Seed, 0x6e6577+uint64(k)); err != nil {
			panic(fmt.Sprintf("sim: a new member's key: %v", err))
		}
		if endorser, err = endorserFrom(w.sc.Seed, 0xe2d0+uint64(id), e+1); err != nil {
			panic(fmt.Sprintf("sim: a new member's endorsement keys: %v", err))
		}
	}
	var members []wire.EpochMember
	for i, s := range w.srv {
		if !(rc.removes() && i == rc.Server) && w.member(i) {
			members = append(members, epochMember(i, s.key, s.endorser))
		}
	}
	if adds {
		members = append(members, epochMember(id, key, endorser))
	}
	prev := [32]byte(w.keys.Cluster)
	if all := w.chain.Since(0); len(all) > 0 {
		prev = wire.EpochHash(all[len(all)-1].Signed)
	}
	f := w.chain.Faults(e - 1)
	if rc.Kind == ChangeAdd || rc.Kind == ChangeRemove {
		f = quorum.MaxFaults(len(members)) // f follows n (certs.PlanChange)
	}
	body := &wire.EpochBody{Cluster: w.keys.Cluster, Number: e, Prev: prev, Members: members, F: uint16(f)}
	if w.operator != nil {
		body.Approvers = []crypto.PublicKey{w.operator.Public.Wire} // as certs.PlanChange names them
	}
	if w.ca != nil {
		// A closed run's epochs list its client CA, in force, as
		// certs.PlanChange carries it over: without it the next change's
		// approval counted for nothing.
		body.ClientCAs = []crypto.PublicKey{w.ca.Public.Wire}
	}
	signer := w.epochSigner
	if rc.Kind == ChangeRotateCA {
		// The epoch, signed by the CA in force, names the next; that one
		// signs every later epoch (certs.PlanChange's rotation).
		next, err := simCA(w.sc.Seed, uint64(k))
		if err != nil {
			panic(fmt.Sprintf("sim: the next cluster CA: %v", err))
		}
		body.NextCA = next.Cert.Raw
		if w.epochSigner, err = next.EpochSigner(); err != nil {
			panic(fmt.Sprintf("sim: the next cluster CA's key: %v", err))
		}
	}
	signed, err := wire.SignEpoch(signer, body)
	if err != nil {
		panic(fmt.Sprintf("sim: signing epoch %d: %v", e, err))
	}
	w.caOf[e] = signer
	if _, err := w.chain.Check(signed); err != nil {
		panic(fmt.Sprintf("sim: the world's own epoch %d: %v", e, err))
	}
	en := &wire.Endorse{Proposal: signed}
	if approver := cmp.Or(w.ca, w.operator); approver != nil {
		a, err := wire.SignApproval(approver, w.keys.Cluster, e, signed)
		if err != nil {
			panic(fmt.Sprintf("sim: approving epoch %d: %v", e, err))
		}
		en.Approval = &a
	}
	w.pending = &pendingChange{k: k, rc: rc, e: e, id: id, key: key, endorser: endorser, endorse: en}
	if rc.removes() {
		w.leftOutIn[rc.Server] = e
	}
	if rc.Kind == ChangeReplace {
		w.trace("the operator proposes to replace s%d by s%d: epoch %d (%s)", rc.Server, id, e, rc)
	} else {
		w.trace("the operator proposes epoch %d: %s (n=%d f=%d)", e, rc, len(members), f)
	}

	if rc.removedFaulty() {
		s := w.srv[rc.Server]
		if s.byz == nil {
			b, err := w.newServerByz(rc.Server, w.sc.N, append(slices.Clone(rc.RemovedByzantine), w.sc.variedBehaviors(rc.Server)...))
			if err != nil {
				panic(err) // checkChanges checked the names
			}
			s.byz = b
		} else {
			for _, name := range rc.RemovedByzantine {
				beh, _ := NewBehavior(name)
				s.byz.behaviors = append(s.byz.behaviors, beh)
			}
		}
		w.stays[rc.Server] = rc.RemovedStays
		w.trace("s%d is faulty from now on (behaviours %v, stays in epoch %d: %t)", rc.Server, rc.RemovedByzantine, e-1, rc.RemovedStays)
	}
	msg := &wire.Message{Endorse: en}
	for i := range w.srv {
		if w.memberOf(i, e-1) {
			w.after(w.delay(), func() { w.propose(i, e, msg) })
		}
	}
}

// propose shows member i of the epoch before the proposal, as the
// operator's command does, and again every pushRetry until the epoch
// counts (change 49).
func (w *World) propose(i int, e uint64, msg *wire.Message) {
	if w.epochNumber() >= e {
		return
	}
	if w.srv[i].up {
		w.serverStep(i, core.Input{Kind: core.InputMessage, From: wire.ClientPeer(operator), Msg: msg})
	}
	w.after(pushRetry, func() { w.propose(i, e, msg) })
}

// followAdopted completes the pending change once server i adopted its
// epoch: the world's chain takes it (with the endorsements that made it
// count), the new member starts with it (as the operator starts it once
// its command wrote the epoch), and the epoch is pushed to every server.
func (w *World) followAdopted(i int) {
	p := w.pending
	if p == nil || !w.srv[i].up || w.srv[i].core.Chain() == nil || w.srv[i].core.Chain().Number() < p.e {
		return
	}
	if _, err := w.chain.Extend(w.srv[i].core.Chain().Since(w.chain.Number())[:p.e-w.chain.Number()]); err != nil {
		panic(fmt.Sprintf("sim: s%d's epoch %d does not continue the world's chain: %v", i, p.e, err))
	}
	w.pending = nil
	w.stats.Changes++
	w.trace("epoch %d counts: endorsed by q members of epoch %d (s%d adopted it)", p.e, p.e-1, i)
	if p.rc.adds() {
		byz := p.rc.NewByzantine
		if len(byz) > 0 {
			byz = append(slices.Clone(byz), w.sc.variedBehaviors(p.id)...)
		}
		w.startMember(p.id, p.key, p.endorser, byz)
	}
	news := &wire.Message{EpochNews: wire.NewsOf(w.chain.Since(0))}
	for j := range w.srv {
		w.after(w.delay(), func() { w.push(j, p.e, news) })
	}
}

// simCA is the cluster CA the k-th change rotates to: a self-signed CA
// certificate of a key from the seed's own stream, with fixed dates (the
// chain reads only its key).
func simCA(seed, k uint64) (*certs.CA, error) {
	r := rand.NewChaCha8([32]byte(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(make([]byte, 16), seed), 0xca+k)))
	return certs.NewCA(fmt.Sprintf("sim %d", seed), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), r)
}

func epochMember(id int, key *crypto.PrivateKey, endorser *wire.Endorser) wire.EpochMember {
	m := wire.EpochMember{ID: wire.ServerID(id), Address: fmt.Sprintf("s%d.sim:7000", id), Key: key.Public.Wire, Cert: []byte{0x30}}
	if endorser != nil {
		k := endorser.Keys()
		m.Endorse = &k
	}
	return m
}

// newServerByz makes server id's faulty behaviours, its colluding client's
// key and the second cluster, each from the streams a faulty server of the
// scenario would have.
func (w *World) newServerByz(id, n int, names []string) (*Byz, error) {
	b, err := newByz(wire.ServerID(id), n, w.srv[id].key, w.keys, rand.New(rand.NewPCG(w.sc.Seed, 0xb12+uint64(id))), names)
	if err != nil {
		return nil, err
	}
	b.TTL = w.sc.TTL
	if b.Collude, err = keyFrom(w.sc.Seed, 0xc011+uint64(id)); err != nil {
		return nil, err
	}
	b.Foreign = w.foreign
	b.Chain, b.Leaked, b.Serves = w.theChain, w.leakedKeys, w.servesOf(id)
	b.LeakedEndorsers, b.CAOf = w.leakedEndorsers(id), w.caKeyOf
	return b, nil
}

// servesOf is the epoch server id's core serves now (0 while it is down).
func (w *World) servesOf(id int) func() uint64 {
	return func() uint64 {
		if s := w.srv[id]; s.core != nil {
			serves, _ := s.core.Epoch()
			return serves
		}
		return 0
	}
}

// theChain is the epochs the operator signed so far (nil without changes).
func (w *World) theChain() *wire.Chain { return w.chain }

// leakedKeys are the signing keys of the members an epoch left out, each
// from the moment every correct member of that epoch serves it or a later
// one: the assumption of docs/protocol.md change 47 lets an ended epoch's
// keys leak from then on (the leaked-keys behaviour uses them).
func (w *World) leakedKeys() map[wire.ServerID]*crypto.PrivateKey {
	out := map[wire.ServerID]*crypto.PrivateKey{}
	for _, id := range slices.Sorted(maps.Keys(w.leftOutIn)) {
		if e := w.leftOutIn[id]; !w.leaked[id] && w.servedByAll(e) {
			w.leaked[id] = true
			w.trace("s%d's key leaks: every correct member of epoch %d serves it", id, e)
		}
		if w.leaked[id] {
			out[wire.ServerID(id)] = w.srv[id].key
		}
	}
	return out
}

// caKeyOf is the cluster CA key that signed epoch e (nil if none did).
func (w *World) caKeyOf(e uint64) *crypto.PrivateKey { return w.caOf[e] }

// leakedEndorsers are, for faulty server self, the endorsement keys of the
// members whose signing keys leaked (leakedKeys), as their disks hold them
// now — a correct member destroyed the key of every epoch it endorsed or
// holds — and self's own, whole: a faulty member destroys nothing.
func (w *World) leakedEndorsers(self int) func() map[wire.ServerID]*wire.Endorser {
	return func() map[wire.ServerID]*wire.Endorser {
		out := map[wire.ServerID]*wire.Endorser{}
		if en := w.srv[self].endorser; en != nil {
			out[wire.ServerID(self)] = en.Clone()
		}
		for id := range w.leakedKeys() {
			s := w.srv[id]
			if s.endorser == nil {
				continue
			}
			en := s.endorser.Clone()
			_ = s.disk.ForEach(core.BucketEndorseKey, func(_, v []byte) error {
				if got, err := wire.LoadEndorser(en.Keys(), en.Leaves(), v); err == nil {
					en = got
				}
				return nil
			})
			out[id] = en
		}
		return out
	}
}

// checkEpochs fails the run if a correct server or client holds an epoch
// the operator did not sign, or was shown two of one number (change 64:
// retired keys endorse nothing, so an out-of-date node adopts no fork).
func (w *World) checkEpochs() {
	if w.chain == nil {
		return
	}
	check := func(who string, ch *wire.Chain) {
		if ch == nil {
			return
		}
		if c := ch.Conflict(); c != nil {
			w.h.violate(CheckEpochs, w.instant(), "%s holds two epochs %d, both verified", who, c.Number)
			return
		}
		for e := uint64(1); e <= ch.Number(); e++ {
			if e > w.chain.Number() || string(ch.Since(e - 1)[0].Signed.Body) != string(w.chain.Since(e - 1)[0].Signed.Body) {
				w.h.violate(CheckEpochs, w.instant(), "%s holds an epoch %d the operator did not sign", who, e)
				return
			}
		}
	}
	for i, s := range w.srv {
		if s.byz == nil && s.up {
			check(fmt.Sprintf("s%d", i), s.core.Chain())
		}
	}
	for i, c := range w.cli {
		if c.alive {
			check(fmt.Sprintf("c%d", i), c.c.Chain())
		}
	}
}

// servedByAll reports whether epoch e counts (its change is done) and every
// correct member of it is up and serves e or a later epoch.
func (w *World) servedByAll(e uint64) bool {
	if w.epochNumber() < e {
		return false
	}
	for i, s := range w.srv {
		if s.byz != nil || !w.memberOf(i, e) {
			continue
		}
		if !s.up {
			return false
		}
		if serves, _ := s.core.Epoch(); serves < e {
			return false
		}
	}
	return true
}

// startMember starts the new member id as the operator does: epoch 0's
// keyring, its own key, the signed epochs, an empty disk; faulty with the
// behaviours byz, if any. Its links come up as a restarted server's do.
func (w *World) startMember(id int, key *crypto.PrivateKey, endorser *wire.Endorser, byz []string) {
	s := &simServer{id: wire.ServerID(id), key: key, endorser: endorser, disk: newDisk(), acks: make(map[regKey]quorum.Timestamp), reset: make(map[int]uint64)}
	w.srv = append(w.srv, s)
	cfg := w.serverConfig(s)
	cfg.Epochs = w.chain.Since(0)
	s.cfg = cfg
	c, err := core.New(cfg)
	if err != nil {
		panic(fmt.Sprintf("sim: building the new member's core: %v", err))
	}
	if err := c.Restore(s.disk); err != nil {
		panic(fmt.Sprintf("sim: the new member's empty disk: %v", err))
	}
	s.core, s.up = c, true
	if len(byz) > 0 {
		// It talks to every server id up to its own.
		b, err := w.newServerByz(id, id+1, byz)
		if err != nil {
			panic(err)
		}
		s.byz = b
	}
	if s.byz != nil {
		w.trace("s%d starts: the new member, faulty (%v)", id, byz)
	} else {
		w.trace("s%d starts: the new member", id)
	}
	for o := range w.cut {
		if o != id && w.reachable(id, o) {
			w.linkUp(id, o)
		}
	}
	w.after(w.between(0, w.sc.TickMax), func() { w.serverTick(id) })
}

// push shows server i the epochs, up to e, as the operator's command does,
// and again every pushRetry while i does not know e, until the command is
// done: q of the epoch before sealed it and q of e serve it.
// It looks whether i knows e before it pushes again, not right after a
// push: a crash before the epoch is on i's disk loses it.
func (w *World) push(i int, e uint64, news *wire.Message) {
	if w.epochNumber() > e {
		return // a later change pushes its own
	}
	if w.srv[i].up && !w.knows(i, e) {
		w.serverStep(i, core.Input{Kind: core.InputMessage, From: wire.ClientPeer(operator), Msg: news})
	}
	w.after(pushRetry, func() {
		if w.knows(i, e) || w.stays[i] || w.pushDone(e) {
			return
		}
		w.push(i, e, news)
	})
}

// pushDone: q_{e−1} members of e−1 know e, and q_e members of e serve it.
func (w *World) pushDone(e uint64) bool {
	_, qOld, _ := w.chain.Keyring(e - 1)
	_, qNew, _ := w.chain.Keyring(e)
	sealed, serving := 0, 0
	for i, s := range w.srv {
		if !s.up {
			continue
		}
		serves, knows := s.core.Epoch()
		if w.memberOf(i, e-1) && knows >= e {
			sealed++
		}
		if w.memberOf(i, e) && serves >= e {
			serving++
		}
	}
	return sealed >= qOld && serving >= qNew
}

// observeEpoch notes when server i begins serving a newer epoch.
func (w *World) observeEpoch(i int) {
	s := w.srv[i]
	if w.chain == nil || !s.up {
		return
	}
	if serves, _ := s.core.Epoch(); serves > s.serves {
		s.serves = serves
		w.servedAt[i] = w.now
		w.trace("s%d serves epoch %d", i, serves)
	}
}

// dropsNews: a removed member that stays in its epoch never takes an
// EpochNews (RemovedStays).
func (w *World) dropsNews(i int, in core.Input) bool {
	return w.stays[i] && in.Msg != nil && in.Msg.EpochNews != nil
}

// dials reports whether client c's runtime keeps a connection to server s:
// the SDK dials the members of the newest epoch its bakery knows.
func (w *World) dials(c int, s int) bool {
	ch := w.cli[c].c.Chain()
	if ch == nil || ch.Number() == 0 {
		return s < w.sc.N
	}
	keys, _, _ := ch.Keyring(ch.Number())
	return keys.Key(wire.ServerID(s)) != nil
}

// ackQuorum reports whether the servers in from hold q_e members of one
// epoch e (q without changes).
func (w *World) ackQuorum(from map[int]bool) bool {
	if w.chain == nil {
		return len(from) >= w.q
	}
	for e := uint64(0); e <= w.chain.Number(); e++ {
		keys, q, _ := w.chain.Keyring(e)
		n := 0
		for s := range from {
			if keys.Key(wire.ServerID(s)) != nil {
				n++
			}
		}
		if n >= q {
			return true
		}
	}
	return false
}

// followMove: after client c moved to a newer epoch, each attempt not yet
// holding has started over under a new attempt number (bakery/epoch.go);
// the history carries the Lock call over to it.
func (w *World) followMove(c int) {
	cl := w.cli[c]
	moves := cl.c.Stats.EpochMoves
	if moves == cl.moves {
		return
	}
	cl.moves = moves
	w.stats.EpochMoves++
	w.trace("c%d moves to epoch %d", c, cl.c.Epoch())
	w.showProclamations(c, -1) // to the members it dials now
	for _, lock := range w.sc.Locks {
		a := w.h.current(c, lock)
		att := cl.c.Attempt(lock)
		if a == nil || att == 0 || att == a.att || a.completed() != nil {
			continue
		}
		w.stats.Restarted++
		w.h.restarted(a, att)
		w.trace("c%d's attempt on %s starts over in epoch %d: att=%d after att=%d", c, lock, cl.c.Epoch(), att, a.att)
	}
}

// checkChangesDone: by the end of a run with changes, every correct member
// of the newest epoch that is up serves it, and every live correct client
// that keeps a session open knows it, but one the operator revoked (a
// liveness property of the change: the quiet period leaves q of each epoch
// up and connected). A client without a session — its session failed after
// its workload's end, so it sends nothing that names its epoch — learns the
// epoch when it next opens one (campaign seed 8517460).
func (w *World) checkChangesDone() {
	if w.chain == nil {
		return
	}
	// Every change the operator was to make counts by the end (issue 58:
	// a change that never completed left a run, and a regression replay,
	// with nothing of what it was drawn to test; a closed run's epochs
	// listed no client CA, so the second change's approval was refused for
	// good and nobody noticed).
	if w.changesMade < len(w.sc.Replace) || w.pending != nil {
		pending := "none"
		if p := w.pending; p != nil {
			pending = fmt.Sprintf("epoch %d (%s)", p.e, p.rc)
		}
		w.h.violate(CheckLiveness, w.instant(), "%d of the run's %d changes counted by the end (pending: %s)", w.stats.Changes, len(w.sc.Replace), pending)
	}
	if w.chain.Number() == 0 {
		return
	}
	e := w.chain.Number()
	at := w.instant()
	for i, s := range w.srv {
		if s.byz != nil || !s.up || !w.member(i) {
			continue
		}
		if serves, knows := s.core.Epoch(); serves != e {
			from, done, copying := s.core.Copying()
			w.h.violate(CheckLiveness, at, "s%d, a correct member of epoch %d, does not serve it by the end (serves %d, knows %d; copying %t from epoch %d, %d members done)",
				i, e, serves, knows, copying, from, done)
		}
	}
	for c, cl := range w.cli {
		if _, revoked := w.revokedAt[c]; revoked {
			continue // the servers refuse it everything, epoch news included
		}
		if cl.alive && cl.c.Heartbeating() && cl.c.Epoch() != e {
			w.h.violate(CheckLiveness, at, "live c%d knows epoch %d at the end, the cluster is in %d", c, cl.c.Epoch(), e)
		}
	}
}
