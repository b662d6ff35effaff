package crypto

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"
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
// evicts only verdicts, which are then computed again.
const verdictGeneration = 16384

// INVARIANT: every entry maps verdictKey(d, p, body, sig) to
// p.verify(d, body, sig); len(cur), len(old) ≤ verdictGeneration.
type verdictMemo struct {
	mu       sync.Mutex
	cur, old map[[32]byte]bool
	hits     uint64
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
		return v, true
	}
	return false, false
}

func (m *verdictMemo) put(k [32]byte, v bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil || len(m.cur) >= verdictGeneration {
		m.old, m.cur = m.cur, make(map[[32]byte]bool, verdictGeneration)
	}
	m.cur[k] = v
}

// VerdictHits is how many verdicts were answered from the memo since the
// process started (a metric and a test's probe).
func VerdictHits() uint64 {
	verdicts.mu.Lock()
	defer verdicts.mu.Unlock()
	return verdicts.hits
}
