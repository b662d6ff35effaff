package core

import (
	"maps"
	"slices"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// The copy, the sealed side (docs/protocol.md change 43): a server that
// sealed an epoch it was a member of hands its state to each member of the
// newest epoch that asks, in parts. Its state no longer changes in the
// sealed epoch (epoch.go), so every part of one copy is of one state; a
// member kept in the new epoch that serves it already hands its state as it
// is now, which holds all it accepted in the sealed one.

// copyPartBytes is the budget of one part's entries: a quarter of a frame,
// so a part with one entry of the largest size still fits.
const copyPartBytes = crypto.MaxMessageSize / 4

// serveCopy answers a CopyRequest of peer s: only a member of the epoch
// after the one asked for is answered — the epoch it copies into, the
// newest or one it catches up with (copyTarget) — and only for an epoch
// this server was a member of and sealed (it knows a later one, and serves
// none before).
func (k *Core) serveCopy(now time.Time, s wire.ServerID, r *wire.CopyRequest, e *Effects) {
	if k.chain == nil || r.Epoch >= k.chain.Number() || r.Epoch > k.cfg.Keys.Epoch {
		return
	}
	if keys, _, _ := k.chain.Keyring(r.Epoch); keys.Key(k.cfg.Self) == nil {
		return
	}
	if _, member := k.chain.Body(r.Epoch + 1).Member(s); !member {
		return
	}
	// One copy per member per copyRetry/2: a correct copier asks again
	// only after copyRetry without a part, so only a faulty one is held
	// back from making this server send its whole state over and over.
	if at, ok := k.copiesServed[s]; ok && now.Sub(at) < copyRetry/2 {
		return
	}
	k.copiesServed[s] = now
	budget := copyPartBytes
	if k.cfg.CopyPartBytes > 0 {
		budget = k.cfg.CopyPartBytes
	}
	for _, p := range k.copyParts(r.Epoch, budget) {
		e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: &wire.Message{Copy: p}})
	}
}

// copyParts is this server's state in parts of about budget bytes each:
// register values, each lock's hw, certificates, bans, revocations and the
// clients' sessions and counters; the last part is marked and numbers the
// count.
func (k *Core) copyParts(epoch uint64, budget int) []*wire.Copy {
	var parts []*wire.Copy
	cur, size := &wire.Copy{}, 0
	room := func(v any) {
		n := len(mustMarshal(v))
		full := len(cur.Registers) == wire.MaxCopyItems || len(cur.HW) == wire.MaxCopyItems || len(cur.HWJ) == wire.MaxCopyItems ||
			len(cur.Certs) == wire.MaxCopyItems || len(cur.Bans) == wire.MaxCopyItems ||
			len(cur.Revocations) == wire.MaxCopyItems || len(cur.Clients) == wire.MaxCopyItems
		if size > 0 && (size+n > budget || full) {
			parts = append(parts, cur)
			cur, size = &wire.Copy{}, 0
		}
		size += n
	}
	for _, c := range sortedClients(k.clientLocks) {
		for _, name := range sortedKeys(k.clientLocks[c]) {
			for _, m := range k.registerForwards(name, c) {
				room(m.Forward)
				cur.Registers = append(cur.Registers, *m.Forward)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(k.locks)) {
		if hw := k.locks[name].HW(); hw != nil {
			room(&hw.Signed)
			cur.HW = append(cur.HW, hw.Signed)
			if f, ok := k.hwWithJ(name); ok {
				room(&f)
				cur.HWJ = append(cur.HWJ, f)
			}
		}
	}
	clients := k.mute.CopyClients()
	for _, cc := range clients {
		if cert := k.mute.Certificate(cc.Client); cert != nil {
			room(cert)
			cur.Certs = append(cur.Certs, *cert)
		}
	}
	for _, c := range sortedClients(k.banned) {
		room(k.banned[c])
		cur.Bans = append(cur.Bans, *k.banned[c])
	}
	for _, c := range sortedClients(k.revoked) {
		room(k.revoked[c])
		cur.Revocations = append(cur.Revocations, k.revoked[c])
	}
	for _, cc := range clients {
		room(&cc)
		cur.Clients = append(cur.Clients, cc)
	}
	parts = append(parts, cur)
	for i, p := range parts {
		p.Epoch, p.Part = epoch, uint64(i+1)
	}
	parts[len(parts)-1].Last = true
	return parts
}
