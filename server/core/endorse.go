package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// Endorsements, a member's side (docs/protocol.md change 49). A member of the
// newest epoch e this server holds endorses the epoch after it — signed by
// the cluster CA in force and approved by the operator (with a client CA
// key in force on a closed cluster; with an operator key in force on an
// open one that has one, change 65) — once per number: it persists which
// epoch it endorsed before its endorsement leaves, and refuses every other
// epoch of that number for good. It sends what it gathered to the other members of e and
// back to whoever sent it, and adopts the epoch (it seals, change 43) once
// q_e members endorsed it. A server that is no member of e endorses nothing;
// it learns the epoch whole (an EpochNews) from a peer or the operator.

// bucketEndorsed: epoch number (8 bytes, big-endian) → the EpochHash of the
// epoch this server endorsed with that number.
const bucketEndorsed = "endorsed"

// BucketEndorseKey: "state" → the secret part of this server's endorsement
// keys (wire.Endorser.State, change 64). The runtime keeps it out of the
// store, in the member's endorse.key file, overwritten in place, so that a
// destroyed key does not linger in a free page of the store; the simulator
// keeps it on its disk.
const BucketEndorseKey = "endorse-key"

var endorseKeyState = []byte("state")

// proposal is the epoch after the newest held that this server endorsed,
// and the endorsements gathered for it.
// INVARIANT: body.Number == chain.Number()+1; every endorsement in by
// verified against the newest epoch's members, for this epoch.
type proposal struct {
	signed   crypto.Signed
	approval *crypto.Signed
	body     *wire.EpochBody
	hash     [32]byte
	by       map[wire.ServerID]wire.SignedEndorsement
}

// Endorsed is the hash of the epoch this server endorsed with number n, if any.
func (k *Core) Endorsed(n uint64) ([32]byte, bool) {
	h, ok := k.endorsed[n]
	return h, ok
}

// onEndorse takes an Endorse of peer or client from: it checks the proposed
// epoch as the next one, endorses it if this server may (a member of the
// newest epoch, the operator's approval (changes 49 and 65), no other
// epoch of the number endorsed), adds the endorsements shown, sends on what
// grew, and adopts the epoch once q of the newest epoch's members
// endorsed it. The error is for a client: why this server did not endorse.
func (k *Core) onEndorse(now time.Time, from wire.Peer, m *wire.Endorse, e *Effects) error {
	if k.chain == nil {
		return errors.New("core: this server was started without the cluster CA: it endorses no epoch")
	}
	n := k.chain.Number() + 1
	if k.pending != nil && k.pending.body.Number != n {
		k.pending = nil // the chain moved on without it
	}
	h := wire.EpochHash(m.Proposal)
	p := k.pending
	if p == nil || p.hash != h {
		body, err := k.chain.Check(m.Proposal)
		if err != nil {
			if held, ok := k.endorsedOrHeld(m.Proposal); ok {
				// An epoch this server holds already: whoever shows it with
				// fewer than q endorsements (the operator gathering, a peer
				// behind) gets the q it counted with. One that shows q gets
				// nothing: two holders never answer each other for ever.
				if _, q, _ := k.chain.Keyring(held - 1); len(m.Endorsements) < q {
					ep := k.chain.Since(held - 1)[0]
					e.Send = append(e.Send, Outgoing{To: from, Msg: &wire.Message{Endorse: &wire.Endorse{Proposal: ep.Signed, Endorsements: ep.Endorsements}}})
				}
				return nil
			}
			return err
		}
		if prev, ok := k.endorsed[n]; ok && prev != h {
			return fmt.Errorf("core: this server endorsed another epoch %d (%x…); it endorses one epoch of a number, for good", n, prev[:4])
		}
		keys, _, _ := k.chain.Keyring(k.chain.Number())
		if keys.Key(k.cfg.Self) == nil {
			return fmt.Errorf("core: this server is no member of epoch %d: only its members endorse epoch %d", n-1, n)
		}
		if err := k.approved(n, m); err != nil {
			return err
		}
		p = &proposal{signed: m.Proposal, approval: m.Approval, body: body, hash: h, by: map[wire.ServerID]wire.SignedEndorsement{}}
		k.pending = p
	}
	keys, q, _ := k.chain.Keyring(k.chain.Number())
	grew := false
	for i := range m.Endorsements {
		es := m.Endorsements[i]
		if _, dup := p.by[es.Server]; dup {
			continue
		}
		if b, err := es.Verify(keys); err == nil && b.Number == n && b.Hash == h {
			p.by[es.Server], grew = es, true
		}
	}
	if _, own := p.by[k.cfg.Self]; !own {
		if es, ok := k.ownEndorsements[n]; ok && k.endorsed[n] == h {
			// Its own, made before a restart lost the proposal: the key
			// that signed it is destroyed, the endorsement is on disk.
			p.by[k.cfg.Self], grew = es, true
		} else {
			es, err := k.signEndorsement(n, p.signed, e)
			if err != nil {
				return err
			}
			p.by[k.cfg.Self], grew = es, true
		}
	}
	if _, ok := k.ownEndorsements[n]; !ok || k.endorsed[n] != h {
		// On disk in the batch the endorsement leaves after: a restart
		// never endorses another epoch of this number, and shows the
		// endorsement it made (its one-time key is gone, change 64). Also
		// when the endorsement shown is this server's own, valid, that its
		// store does not remember (a store older than what it signed).
		k.rememberEndorsement(n, h, p.by[k.cfg.Self], e)
	}
	if grew {
		out := &wire.Message{Endorse: k.endorseMsg(p)}
		for _, s := range k.newestPeers() {
			e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: out})
		}
		if from.IsClient {
			e.Send = append(e.Send, Outgoing{To: from, Msg: out})
		}
	} else if from.IsClient {
		e.Send = append(e.Send, Outgoing{To: from, Msg: &wire.Message{Endorse: k.endorseMsg(p)}})
	}
	if len(p.by) >= q {
		ep := wire.Epoch{Signed: p.signed}
		for _, id := range slices.Sorted(maps.Keys(p.by)) {
			ep.Endorsements = append(ep.Endorsements, p.by[id])
		}
		k.pending = nil
		return k.onEpochNews(now, wire.NewsOf([]wire.Epoch{ep}), e)
	}
	return nil
}

// signEndorsement endorses epoch n, signed as signed: with this server's
// one-time key for n, which is destroyed then, its state persisted in e
// before the endorsement leaves (change 64); with its signing key if it has
// no endorsement keys.
func (k *Core) signEndorsement(n uint64, signed crypto.Signed, e *Effects) (wire.SignedEndorsement, error) {
	if k.endorser == nil {
		es, err := wire.SignEndorsement(k.cfg.Signer, k.cfg.Keys.Cluster, k.cfg.Self, n, signed)
		if err != nil {
			panic(fmt.Sprintf("core: signing an endorsement: %v", err)) // our own struct always encodes: a bug
		}
		return es, nil
	}
	es, err := k.endorser.Sign(k.cfg.Keys.Cluster, k.cfg.Self, n, signed)
	if err != nil {
		return wire.SignedEndorsement{}, fmt.Errorf("core: this server cannot endorse epoch %d: %w", n, err)
	}
	k.endorserDirty = true
	k.persistEndorseKey(e)
	return es, nil
}

// forgetEndorseKeys destroys this server's endorsement keys of every epoch
// the chain holds (change 64: a member endorses no epoch of a number it
// holds), and persists the state in e if it changed.
func (k *Core) forgetEndorseKeys(e *Effects) {
	if k.endorser == nil {
		return
	}
	if k.chain != nil && k.endorser.Forget(k.chain.Number()) {
		k.endorserDirty = true
	}
	k.persistEndorseKey(e)
}

func (k *Core) persistEndorseKey(e *Effects) {
	if k.endorserDirty {
		k.endorserDirty = false
		e.Persist = append(e.Persist, Record{Bucket: BucketEndorseKey, Key: endorseKeyState, Value: k.endorser.State()})
	}
}

// restoreEndorseKey puts back the state of this server's endorsement keys,
// and refuses a store that does not remember an endorsement the chain shows
// this server made: its data directory is older than what it signed (a
// backup put back), and it could endorse a second epoch of that number.
func (k *Core) restoreEndorseKey(r Reader) error {
	err := r.ForEach(BucketEndorseKey, func(key, v []byte) error {
		if string(key) != string(endorseKeyState) {
			return nil
		}
		if k.endorser == nil {
			return errors.New("core: the store holds endorsement keys, but this server was started without them")
		}
		return k.endorser.SetState(v)
	})
	if err != nil {
		return fmt.Errorf("core: restoring the endorsement keys: %w", err)
	}
	if k.chain == nil {
		return nil
	}
	for n := uint64(1); n <= k.chain.Number(); n++ {
		ep := k.chain.Since(n - 1)[0]
		for _, es := range ep.Endorsements {
			if es.Server != k.cfg.Self {
				continue
			}
			if h, ok := k.endorsed[n]; !ok || h != wire.EpochHash(ep.Signed) {
				return fmt.Errorf("core: epoch %d carries this server's endorsement, but its store does not remember making it: "+
					"its data directory is older than what it signed (put back from a backup?), and it could endorse a second epoch of a number. "+
					"Do not run it under this identity: replace it (bqserver server replace %d)", n, k.cfg.Self)
			}
		}
	}
	return nil
}

// noteOwnEndorsement takes epoch n, adopted as ep: if it carries this
// server's endorsement that its store does not remember, the store is older
// than what the server signed (change 64; Restore refuses such a store when
// it starts): it remembers the endorsement now, so that it never endorses
// another epoch n, and counts it for the runtime to say so.
func (k *Core) noteOwnEndorsement(n uint64, ep wire.Epoch, e *Effects) {
	for _, es := range ep.Endorsements {
		if es.Server != k.cfg.Self {
			continue
		}
		h := wire.EpochHash(ep.Signed)
		if prev, ok := k.endorsed[n]; !ok || prev != h {
			k.Stats.EndorsementsForgotten++
			k.rememberEndorsement(n, h, es, e)
		}
	}
}

// showPending shows peer s, a member of the newest epoch held that just
// connected, the proposal this server endorsed and what it gathered for it
// (change 49): endorsements go to the peers only when they grow, so two
// halves of a partition that each gathered fewer than q would otherwise
// never pool them once it heals, and the change would wait for an
// operator's command that gathers them (found by the simulator once every
// change had to count: seed 54100847).
func (k *Core) showPending(s wire.ServerID, e *Effects) {
	p := k.pending
	if p == nil || k.chain == nil || p.body.Number != k.chain.Number()+1 {
		return
	}
	if keys, _, _ := k.chain.Keyring(k.chain.Number()); keys.Key(s) == nil {
		return
	}
	e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: &wire.Message{Endorse: k.endorseMsg(p)}})
}

// endorsedOrHeld reports whether s is an epoch the chain holds.
func (k *Core) endorsedOrHeld(s crypto.Signed) (uint64, bool) {
	var b wire.EpochBody
	if crypto.Unmarshal(s.Body, &b) != nil || b.Number == 0 || b.Number > k.chain.Number() {
		return 0, false
	}
	held := k.chain.Since(b.Number - 1)
	return b.Number, len(held) > 0 && string(held[0].Signed.Body) == string(s.Body)
}

// approved checks the operator's approval of epoch n: on a closed cluster
// a client CA in force in the newest epoch held signed it (change 49); on
// an open one, an approver in force (approvedOpen).
func (k *Core) approved(n uint64, m *wire.Endorse) error {
	if k.cfg.ClientCA == nil {
		return k.approvedOpen(n, m)
	}
	inForce, _ := k.chain.ClientCAs(k.cfg.ClientCA)
	return wire.VerifyApproval(inForce, k.cfg.Keys.Cluster, n, m.Proposal, m.Approval)
}

// approvedOpen checks the operator's approval of epoch n on an open
// cluster (change 65): one of the approvers in force in the newest epoch
// held — its newest named, else the cluster file's — signed it, so that the
// cluster CA's key alone, which signs any proposal, cannot take a number
// first at every member and freeze the changes for good. An open cluster
// whose cluster file names no approver (made before change 65), and no
// epoch since either, keeps change 49's rule: its members endorse what the
// cluster CA signed.
func (k *Core) approvedOpen(n uint64, m *wire.Endorse) error {
	approvers := k.chain.Approvers(k.cfg.Approver)
	if len(approvers) == 0 {
		return nil
	}
	return wire.VerifyApproval(approvers, k.cfg.Keys.Cluster, n, m.Proposal, m.Approval)
}

// endorseMsg is what this server shows of p: the proposal, its approval,
// and every endorsement gathered, in id order.
func (k *Core) endorseMsg(p *proposal) *wire.Endorse {
	out := &wire.Endorse{Proposal: p.signed, Approval: p.approval}
	for _, id := range slices.Sorted(maps.Keys(p.by)) {
		out.Endorsements = append(out.Endorsements, p.by[id])
	}
	return out
}

// newestPeers are the other members of the newest epoch this server holds:
// the ones that endorse the next.
func (k *Core) newestPeers() []wire.ServerID {
	keys, _, _ := k.chain.Keyring(k.chain.Number())
	var out []wire.ServerID
	for i, key := range keys.Servers {
		if s := wire.ServerID(i); key != nil && s != k.cfg.Self {
			out = append(out, s)
		}
	}
	return out
}

// rememberEndorsement records that this server endorsed epoch n, hash h,
// with es, in memory and in e: the hash and the endorsement, so that a
// restart shows the same endorsement again (its key is destroyed).
func (k *Core) rememberEndorsement(n uint64, h [32]byte, es wire.SignedEndorsement, e *Effects) {
	k.endorsed[n], k.ownEndorsements[n] = h, es
	e.Persist = append(e.Persist, Record{Bucket: bucketEndorsed, Key: epochKey(n), Value: append(h[:], mustMarshal(&es)...)})
}

// restoreEndorsed puts back which epoch of each number this server
// endorsed, and its endorsement where the record holds it (a record of 32
// bytes, the hash alone, was written before change 64).
func (k *Core) restoreEndorsed(r Reader) error {
	return r.ForEach(bucketEndorsed, func(key, v []byte) error {
		if len(key) != 8 || len(v) < 32 {
			return fmt.Errorf("core: an endorsement record of %d and %d bytes", len(key), len(v))
		}
		n := binary.BigEndian.Uint64(key)
		k.endorsed[n] = [32]byte(v[:32])
		if len(v) > 32 {
			var es wire.SignedEndorsement
			if err := crypto.Unmarshal(v[32:], &es); err != nil {
				return fmt.Errorf("core: the endorsement of epoch %d: %w", n, err)
			}
			k.ownEndorsements[n] = es
		}
		return nil
	})
}
