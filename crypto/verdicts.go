package crypto

import (
	"crypto/sha256"
	"encoding/binary"
	"sync/atomic"
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
// p.verify(d, body, sig).
type verdictMemo struct {
	generations[bool]
	hits atomic.Uint64
}

var verdicts = newVerdictMemo()

func newVerdictMemo() *verdictMemo {
	return &verdictMemo{generations: generations[bool]{size: verdictGeneration}}
}

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
	verdict, ok = m.generations.get(k)
	if ok {
		m.hits.Add(1)
	}
	return verdict, ok
}

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
func VerdictHits() uint64 { return verdicts.hits.Load() }
