package core

import (
	"fmt"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// Two epochs of one number (docs/protocol.md change 64). Each needs the
// cluster CA's signature and q endorsements of the epoch before, by keys a
// correct member destroys once it endorsed or holds the number: two of them
// mean keys beyond what bq tolerates have leaked. A server that is shown
// both, verified (wire.Chain.Extend), serves neither from then on — it
// takes no statement, answers every client request but a status with
// ErrCodeEpochConflict after an EpochNews of both, casts no vote, and shows
// both to every peer that speaks to it, once per connection, so that each
// refuses them too — and it stays so after a restart. The runtime raises
// the alarm.

// bucketConflict: "proof" → the wire.EpochConflict this server was shown.
const bucketConflict = "epoch-conflict"

var conflictKey = []byte("proof")

// conflicted reports whether this server holds two epochs of one number.
func (k *Core) conflicted() bool { return k.chain != nil && k.chain.Conflict() != nil }

// noteConflict persists the proof the chain just found, once.
func (k *Core) noteConflict(e *Effects) {
	if k.conflictSaved || !k.conflicted() {
		return
	}
	k.conflictSaved = true
	e.Persist = append(e.Persist, Record{Bucket: bucketConflict, Key: conflictKey, Value: mustMarshal(k.chain.Conflict())})
}

// conflictNews shows both epochs of the conflict: whoever holds either
// verifies the other and finds the conflict itself.
func (k *Core) conflictNews() *wire.Message {
	c := k.chain.Conflict()
	return &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{c.Held, c.Shown})}
}

func (k *Core) conflictErr() error {
	c := k.chain.Conflict()
	return fmt.Errorf("core: this server holds two epochs %d, both signed by the cluster CA and endorsed: keys beyond what bq tolerates have leaked, and it serves neither (%v)", c.Number, c)
}

// conflictClient answers a client's request of a server that holds a
// conflict: both epochs, then ErrCodeEpochConflict (a status is answered,
// so that the operator sees the server).
func (k *Core) conflictClient(c wire.ClientID, m *wire.Message, e *Effects) bool {
	if !k.conflicted() || m.Status != nil {
		return false
	}
	k.Stats.Rejected++
	e.Send = append(e.Send, Outgoing{To: wire.ClientPeer(c), Msg: k.conflictNews()},
		Outgoing{To: wire.ClientPeer(c), Msg: errorMsg(requestID(m), wire.ErrCodeEpochConflict, k.conflictErr())})
	return true
}

// conflictServer drops a peer's message at a server that holds a conflict,
// showing the peer both epochs once per connection.
func (k *Core) conflictServer(s wire.ServerID, e *Effects) bool {
	if !k.conflicted() {
		return false
	}
	if !k.conflictTold[s] {
		k.conflictTold[s] = true
		e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: k.conflictNews()})
	}
	return true
}

// restoreConflict puts back the conflict this server was shown.
func (k *Core) restoreConflict(r Reader) error {
	return r.ForEach(bucketConflict, func(_, v []byte) error {
		var c wire.EpochConflict
		if err := crypto.Unmarshal(v, &c); err != nil {
			return fmt.Errorf("core: restoring the epoch conflict: %w", err)
		}
		if k.chain == nil {
			return nil
		}
		_, _ = k.chain.Extend([]wire.Epoch{c.Held, c.Shown}) // verified again: the chain holds the conflict
		k.conflictSaved = k.conflicted()
		return nil
	})
}
