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

// Epochs and the seal (docs/protocol.md change 43). Anyone may show this
// server epochs (an EpochNews: the operator's push, a peer, a client); each
// is verified by the chain, so a faulty sender can hide an epoch, never forge
// one. Once the chain holds an epoch after the one this server serves, it
// has sealed that epoch: it accepts no statement, Listen, GetSet, read,
// heartbeat, session or vote of it any more, casts no vote, collects
// nothing, answers every request of a client with the epochs after it and
// ErrCodeEpochMoved, and tells each peer once. What it holds stays as it is,
// for the copy the newer epoch's members make of it. Certificates, evidence
// and revocations are still taken: each verifies on its own, and each only
// ends or voids.

// bucketEpoch: epoch number (8 bytes, big-endian) → the signed epoch, as
// adopted. Written before anything the seal changes is sent.
const bucketEpoch = "epoch"

// sealed reports whether this server knows an epoch after the one it serves.
func (k *Core) sealed() bool {
	return k.chain != nil && k.chain.Number() > k.cfg.Keys.Epoch
}

// Epoch is the epoch this server serves and the newest it knows (the same
// unless it sealed).
func (k *Core) Epoch() (serves, knows uint64) {
	serves = k.cfg.Keys.Epoch
	if k.chain != nil {
		return serves, k.chain.Number()
	}
	return serves, serves
}

// Chain is the epochs this server knows (nil if it was started without the
// cluster CA): the runtime reads who to dial from it. The caller must not
// change it, and reads it only where it steps the core.
func (k *Core) Chain() *wire.Chain { return k.chain }

// onEpochNews adopts the epochs shown that continue the chain, persists
// them, and seals when the first after the served one comes. An epoch that
// does not verify changes nothing (the valid ones before it are kept).
func (k *Core) onEpochNews(now time.Time, n *wire.EpochNews, e *Effects) error {
	if k.chain == nil {
		return errors.New("core: this server was started without the cluster CA: it adopts no epoch")
	}
	wasSealed := k.sealed()
	from := k.chain.Number()
	_, err := k.chain.Extend(n.List())
	for i, ep := range k.chain.Since(from) {
		e.Persist = append(e.Persist, Record{Bucket: bucketEpoch, Key: epochKey(from + 1 + uint64(i)), Value: mustMarshal(&ep)})
		k.noteOwnEndorsement(from+1+uint64(i), ep, e)
	}
	k.forgetEndorseKeys(e) // no key of an epoch held survives (change 64)
	k.noteConflict(e)
	if !wasSealed && k.sealed() {
		k.seal(e)
	}
	k.startCopy(now, e)
	return err
}

func epochKey(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// seal ends every subscription (each Listen and GetSet of the sealed epoch is
// answered with the epochs after it, so its client moves instead of waiting)
// and tells every peer of the sealed epoch.
func (k *Core) seal(e *Effects) {
	news := k.news()
	told := map[wire.ClientID]bool{}
	for _, name := range slices.Sorted(maps.Keys(k.locks)) {
		for _, s := range k.locks[name].EndAll() {
			if !told[s.Client] {
				told[s.Client] = true
				e.Send = append(e.Send, Outgoing{To: wire.ClientPeer(s.Client), Msg: news})
			}
			e.Send = append(e.Send, Outgoing{To: wire.ClientPeer(s.Client), Msg: errorMsg(s.Req, wire.ErrCodeEpochMoved, k.movedErr())})
		}
	}
	for _, s := range k.peers() {
		k.tellEpochs(s, e)
	}
}

// news shows the epochs after the one this server serves: the ones a client
// or peer still talking in it lacks (at most MaxEpochNews; the next request
// shows the rest).
func (k *Core) news() *wire.Message { return k.newsSince(k.cfg.Keys.Epoch) }

// newsSince shows the oldest MaxEpochNews epochs after epoch from.
func (k *Core) newsSince(from uint64) *wire.Message {
	all := k.chain.Since(from)
	return &wire.Message{EpochNews: wire.NewsOf(all[:min(len(all), wire.MaxEpochNews)])}
}

// tellClient shows client c, which named epoch named in a SessionOpen,
// Heartbeat, Read or GetSet, the epochs after it that this server knows:
// the oldest MaxEpochNews of them, once per connection (clientRates.told),
// so a client that names the same old epoch again costs nothing more.
func (k *Core) tellClient(c wire.ClientID, named uint64, e *Effects) {
	if k.chain == nil || named >= k.chain.Number() {
		return
	}
	r := k.ratesOf(c)
	last := min(k.chain.Number(), named+wire.MaxEpochNews)
	if r.told >= last {
		return
	}
	r.told = last
	e.Send = append(e.Send, Outgoing{To: wire.ClientPeer(c), Msg: k.newsSince(named)})
}

// behind refuses a Read or a GetSet naming an epoch later than any this
// server knows (docs/protocol.md change 43): it missed the change, and its
// answer, from an older epoch's state, must not count in a quorum of the
// newer one, where a member that serves it has every write completed
// before. The client asks again shortly and shows it the epochs.
func (k *Core) behind(named uint64) error {
	if k.chain == nil || named <= k.chain.Number() {
		return nil
	}
	return fmt.Errorf("core: this server knows epoch %d only and the client names epoch %d; show it the epochs", k.chain.Number(), named)
}

// showPeer shows a peer that connects the newest MaxEpochNews epochs, if the
// cluster ever changed: a member that was down through a change learns it
// from the first peer it reaches (it adopts those that continue its chain;
// the ones it holds are skipped).
func (k *Core) showPeer(s wire.ServerID, e *Effects) {
	if k.chain == nil || k.chain.Number() == 0 {
		return
	}
	e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: &wire.Message{EpochNews: wire.NewsOf(k.chain.Latest())}})
}

func (k *Core) movedErr() error {
	serves, knows := k.Epoch()
	return fmt.Errorf("core: this server sealed epoch %d: the cluster is in epoch %d; ask its members", serves, knows)
}

// tellEpochs shows peer s the newest epochs this server holds (at most
// MaxEpochNews; the peer skips those it holds), once per epoch: not only
// those after the one this server served, which a peer down across several
// changes cannot adopt without the ones before them (issue 54, item 4).
func (k *Core) tellEpochs(s wire.ServerID, e *Effects) {
	if k.told[s] >= k.chain.Number() {
		return
	}
	k.told[s] = k.chain.Number()
	e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: &wire.Message{EpochNews: wire.NewsOf(k.chain.Latest())}})
}

// sealedClient answers a client's request of the sealed epoch: everything
// but a status and a SessionClose is refused with the epochs after it. A
// SessionClose is taken: it only ends its client's own lease here early,
// and a lease left open would get a whole fresh TTL at the copy's end
// (RestartClocks), counting against the client's session limit — a loop of
// short processes that close and exit while a change is under way met that
// limit at the kept members (test/e2e TestGrowFourToSevenThenKillTwo).
func (k *Core) sealedClient(c wire.ClientID, m *wire.Message, e *Effects) bool {
	if !k.sealed() || m.Status != nil || m.EpochNews != nil || m.SessionClose != nil {
		return false
	}
	// The client spoke in that session here, over its own connection, even
	// if this server serves nothing now (change 53): once it serves the
	// next epoch it takes that session's statements from the members that
	// served it first, probation or not. Found by the campaign (seed
	// 3000190): a client opened its session at the one member already
	// serving the new epoch, was refused by the three still copying, and
	// went silent; the copy had put it on probation at those three, which
	// then never took its Doorway from the first, so only that one voted
	// and the Doorway stayed there for ever.
	switch {
	case m.SessionOpen != nil:
		k.spoke(c, m.SessionOpen.Session, e)
	case m.Heartbeat != nil:
		k.spoke(c, m.Heartbeat.Session, e)
	}
	k.Stats.Rejected++
	e.Send = append(e.Send, Outgoing{To: wire.ClientPeer(c), Msg: k.newsSince(min(clientEpoch(m, k.chain.Number()), k.cfg.Keys.Epoch))},
		Outgoing{To: wire.ClientPeer(c), Msg: errorMsg(requestID(m), wire.ErrCodeEpochMoved, k.movedErr())})
	return true
}

// clientEpoch is the epoch a client's message names, so that a sealed
// server shows it the epochs after its own, not after the one this server
// served (change 55). Found by the campaign (seed 3012996): two clients of
// epoch 0 met only members that had served epoch 1 and sealed a later one;
// each showed them the epochs after its own, never epoch 1, so they could
// adopt none and stayed in epoch 0 for good. A message that names none is
// shown the newest epochs, as many as an EpochNews holds (the client skips
// those it holds). The caller shows at least the epochs after the one this
// server served: a client that names a later one is shown those.
func clientEpoch(m *wire.Message, newest uint64) uint64 {
	switch {
	case m.SessionOpen != nil:
		return m.SessionOpen.Epoch
	case m.Heartbeat != nil:
		return m.Heartbeat.Epoch
	case m.Read != nil:
		return m.Read.Epoch
	case m.GetSet != nil:
		return m.GetSet.Epoch
	}
	return newest - min(newest, wire.MaxEpochNews)
}

// sealedServer drops a peer's message of the sealed epoch, telling the peer
// the epochs after it; evidence, revocations and epochs are still taken,
// and certificates while the epoch served is the one its next copy reads
// (change 58).
func (k *Core) sealedServer(s wire.ServerID, m *wire.Message, e *Effects) bool {
	if !k.sealed() || m.Evidence != nil || m.Revoke != nil || m.EpochNews != nil {
		return false
	}
	if m.Reset != nil && k.certsOfServedCount() {
		return false
	}
	if m.Reset != nil {
		k.Stats.OldEpoch++
	}
	k.tellEpochs(s, e)
	return true
}

// certsOfServedCount reports whether a sealed server takes a certificate of
// the epoch it serves live (change 58): only while that epoch is the one its
// next copy reads, or it is removed (no later epoch names it: it votes on
// nothing, and its copy reports are one of f+1). A server that joins in a
// later epoch "serves" the cluster file's epoch until its copy ends, and a
// member that was away across several changes one long ended: their keys
// may have leaked (change 47's assumption). A certificate of epoch 0 that a
// faulty member forged with two such keys reset a live session at a server
// joining in epoch 3, which kept it past its copy (campaign seed 5000057).
// What the certificates of an epoch before the one copied ended, the copy's
// settled counters carry (f+1 reporters, change 47).
func (k *Core) certsOfServedCount() bool {
	to, ok := k.copyTarget()
	return !ok || to-1 == k.cfg.Keys.Epoch
}

// peers are the other servers of the served epoch.
func (k *Core) peers() []wire.ServerID {
	var out []wire.ServerID
	for i, key := range k.cfg.Keys.Servers {
		if s := wire.ServerID(i); key != nil && s != k.cfg.Self {
			out = append(out, s)
		}
	}
	return out
}

// restoreEpochs adopts the epochs this server persisted, oldest first.
func (k *Core) restoreEpochs(r Reader) error {
	var shown []wire.Epoch
	err := r.ForEach(bucketEpoch, func(key, v []byte) error {
		var ep wire.Epoch
		if err := crypto.Unmarshal(v, &ep); err != nil {
			return fmt.Errorf("epoch %x: %w (an epoch adopted before protocol 1.8 carries no endorsements: change 49)", key, err)
		}
		shown = append(shown, ep)
		return nil
	})
	if err != nil {
		return fmt.Errorf("core: restoring epochs: %w", err)
	}
	if len(shown) > 0 && k.chain == nil {
		return fmt.Errorf("core: the disk holds %d epochs, but this server was started without the cluster CA to verify them", len(shown))
	}
	if len(shown) > 0 {
		if _, err := k.chain.Extend(shown); err != nil {
			return fmt.Errorf("core: restoring epochs: %w", err)
		}
	}
	var serving uint64
	err = r.ForEach(bucketServing, func(key, v []byte) error {
		if string(key) == string(servingKey) && len(v) == 8 {
			serving = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("core: restoring the epoch served: %w", err)
	}
	if serving > 0 {
		if k.chain == nil {
			return fmt.Errorf("core: the disk says this server serves epoch %d, but it was started without the cluster CA", serving)
		}
		keys, q, ok := k.chain.Keyring(serving)
		if !ok || keys.Key(k.cfg.Self) == nil {
			return fmt.Errorf("core: the disk says this server serves epoch %d, which it does not hold or is no member of", serving)
		}
		k.serve(keys, q, k.chain.Faults(serving))
	}
	return nil
}
