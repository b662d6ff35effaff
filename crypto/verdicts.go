package crypto

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"time"
)

// Verdicts remembered by what was checked, so that a signature checked in a
// connection's read loop (in parallel with the other connections') is not
// checked again by the server's core, which runs on one goroutine and
// verifies everything it takes in full (docs/protocol.md §1, "one rule").
// A verdict is a pure function of (domain, key, body, signature), and the
// memo's key is a collision-resistant hash of exactly those, so a hit
// decides as the verifier would: the memo can only save work, never change
// an answer. It is bounded: two generations of verdictGeneration entries
// (about 60 bytes each), so a flood of signatures costs at most a few MiB and
// evicts only verdicts, which are then computed again; and it ages
// (AgeCaches), so that what a flood left is let go once it stops.
const verdictGeneration = 16384

// INVARIANT: every entry maps verdictKey(d, p, body, sig) to
// p.verify(d, body, sig); len(cur), len(old) ≤ verdictGeneration.
type verdictMemo struct {
	mu        sync.Mutex
	cur, old  map[[32]byte]bool
	hits      uint64
	rotatedAt time.Time
}

var verdicts = &verdictMemo{}

// verdictKey hashes the scheme-tagged key's fingerprint, the domain, the body and the signature, each length-prefixed.
func verdictKey(d Domain, p *Parsed, body, sig []byte) [32]byte {
	h := sha256.New()
	var n [8]byte
	h.Write(p.ID[:])
	for _, part := range [][]byte{[]byte(d), body, sig} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

func (m *verdictMemo) get(k [32]byte) (verdict, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.cur[k]; ok {
		m.hits++
		return v, true
	}
	if v, ok := m.old[k]; ok {
		m.hits++
		if m.cur == nil || len(m.cur) >= verdictGeneration {
			m.old, m.cur = m.cur, make(map[[32]byte]bool)
		}
		m.cur[k] = v // used again: it stays
		return v, true
	}
	return false, false
}

func (m *verdictMemo) put(k [32]byte, v bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil || len(m.cur) >= verdictGeneration {
		m.old, m.cur = m.cur, make(map[[32]byte]bool)
	}
	m.cur[k] = v
}

// age retires the current generation if it is older than cacheAge at now.
func (m *verdictMemo) age(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Sub(m.rotatedAt) < cacheAge {
		return
	}
	m.rotatedAt = now
	m.old, m.cur = m.cur, make(map[[32]byte]bool)
}

// cacheAge is how long a generation of remembered verdicts or keys stays
// current: what is not used again within two ages is let go (as a server
// core's statement cache does, docs/protocol.md change 26).
const cacheAge = 10 * time.Second

// AgeCaches lets the remembered verdicts and precomputed keys age at now: a
// generation is retired when it is older than cacheAge, and whatever was not
// used since is dropped with the next. A used entry moves to the current
// generation, so what is hot stays. A server calls it from its tick, so
// that after a flood of identities their keys and verdicts are given back
// within two ages (about 20 s).
func AgeCaches(now time.Time) {
	verdicts.age(now)
	expandedKeys.age(now)
}

// VerdictHits is how many verdicts were answered from the memo since the
// process started (a metric and a test's probe).
func VerdictHits() uint64 {
	verdicts.mu.Lock()
	defer verdicts.mu.Unlock()
	return verdicts.hits
}
