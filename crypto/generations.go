package crypto

import (
	"sync"
	"time"
)

// generations is a bounded cache of two generations, safe for concurrent
// use: new entries go to cur; when cur is full, or older than cacheAge at
// an age call, cur becomes old and old is dropped. An entry found in old is
// moved to cur, so what is used stays and what is not is gone within two
// ages (as a server core's statement cache, docs/protocol.md change 26).
// INVARIANT: len(cur) ≤ size and len(old) ≤ size.
type generations[V any] struct {
	size      int
	mu        sync.Mutex
	cur, old  map[[32]byte]V
	rotatedAt time.Time
}

// cacheAge is how long a generation of remembered verdicts or keys stays
// current: what is not used again within two ages is let go.
const cacheAge = 10 * time.Second

func (g *generations[V]) get(k [32]byte) (V, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v, ok := g.cur[k]; ok {
		return v, true
	}
	v, ok := g.old[k]
	if ok {
		g.putLocked(k, v) // used again: it stays
	}
	return v, ok
}

func (g *generations[V]) put(k [32]byte, v V) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.putLocked(k, v)
}

func (g *generations[V]) putLocked(k [32]byte, v V) {
	if g.cur == nil || len(g.cur) >= g.size {
		g.rotate()
	}
	g.cur[k] = v
}

// age retires the current generation if it is older than cacheAge at now.
func (g *generations[V]) age(now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Sub(g.rotatedAt) < cacheAge {
		return
	}
	g.rotatedAt = now
	g.rotate()
}

// rotate, under g.mu: cur becomes old; generations start empty and grow.
func (g *generations[V]) rotate() { g.old, g.cur = g.cur, make(map[[32]byte]V) }

// lens is the sizes of both generations, for tests.
func (g *generations[V]) lens() (cur, old int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.cur), len(g.old)
}
