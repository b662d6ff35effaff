package core

import (
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
