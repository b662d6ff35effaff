package core

import (
	"crypto/sha256"
	"encoding/binary"
	"time"

	"github.com/bq-lock/bq/wire"
)

// verifyCache remembers verified statements by hash, so that a statement
// arriving again (from its client and from peers' forwards and pulls) is
// verified once. It is two generations: new entries go to cur; when cur is
// full, or every verifyCacheAge (Tick), cur becomes old and old is dropped.
// So it holds at most 2 × size entries, and none for long once traffic
// stops: after a flood, its memory is given back within 2 × verifyCacheAge
// (docs/protocol.md change 26).
// INVARIANT: len(cur) ≤ size, len(old) ≤ size.
type verifyCache struct {
	size      int
	cur, old  map[wire.Digest]*wire.Statement
	rotatedAt time.Time
}

// verifyCacheAge is how long an entry stays in the current generation.
const verifyCacheAge = 10 * time.Second

// newVerifyCache makes a cache of about total entries.
func newVerifyCache(total int) *verifyCache {
	size := max(total/2, 1)
	return &verifyCache{size: size, cur: make(map[wire.Digest]*wire.Statement)}
}

func (c *verifyCache) get(h wire.Digest) (*wire.Statement, bool) {
	if st, ok := c.cur[h]; ok {
		return st, true
	}
	st, ok := c.old[h]
	return st, ok
}

func (c *verifyCache) put(h wire.Digest, st *wire.Statement) {
	if _, ok := c.get(h); ok {
		return
	}
	if len(c.cur) >= c.size {
		c.rotate()
	}
	c.cur[h] = st
}

// age rotates the generations every verifyCacheAge.
func (c *verifyCache) age(now time.Time) {
	if now.Sub(c.rotatedAt) < verifyCacheAge {
		return
	}
	c.rotatedAt = now
	c.rotate()
}

func (c *verifyCache) rotate() {
	c.old, c.cur = c.cur, make(map[wire.Digest]*wire.Statement)
}

// ownViews remembers the Views this server signed, by the hash of their
// signed bytes, so that its own View inside a Ticket's J is not verified
// again (one of the q signature checks of every Ticket). Two generations,
// aged with the statement cache; a View is used within a Ticket's round
// trip of being signed, and a miss only costs the check.
// INVARIANT: len(cur) ≤ size, len(old) ≤ size; every body is one this
// server signed, with exactly those bytes.
type ownViews struct {
	size      int
	cur, old  map[wire.Digest]*wire.ViewBody
	rotatedAt time.Time
}

func newOwnViews(size int) *ownViews {
	return &ownViews{size: max(size, 1), cur: make(map[wire.Digest]*wire.ViewBody)}
}

// viewDigest is the hash of a View's signed bytes: body and signature.
func viewDigest(v *wire.SignedView) wire.Digest {
	h := sha256.New()
	var n [4]byte
	for _, part := range [][]byte{v.Signed.Body, v.Signed.Sig} {
		binary.BigEndian.PutUint32(n[:], uint32(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var d wire.Digest
	h.Sum(d[:0])
	return d
}

func (o *ownViews) put(v *wire.SignedView, body *wire.ViewBody) {
	if len(o.cur) >= o.size {
		o.rotate()
	}
	o.cur[viewDigest(v)] = body
}

func (o *ownViews) get(v *wire.SignedView) (*wire.ViewBody, bool) {
	h := viewDigest(v)
	if b, ok := o.cur[h]; ok {
		return b, true
	}
	b, ok := o.old[h]
	return b, ok
}

func (o *ownViews) rotate() { o.old, o.cur = o.cur, make(map[wire.Digest]*wire.ViewBody) }

// age rotates every verifyCacheAge, so that after a flood of Doorways the
// Views it caused are let go within two ages.
func (o *ownViews) age(now time.Time) {
	if now.Sub(o.rotatedAt) < verifyCacheAge {
		return
	}
	o.rotatedAt = now
	o.rotate()
}
