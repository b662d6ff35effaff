package crypto

import (
	"sync/atomic"

	voied "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// Ed25519 signatures are checked by curve25519-voi under the rule bq has
// always used, circl's (and the standard library's): S < L, the cofactorless
// equation [S]B − [k]A = R compared by R's encoding, so a non-canonical R
// never verifies, k = SHA-512(R ‖ A ‖ M) mod L. Small-order and
// non-canonical keys never get here (Parse refuses them). voi's verifier is
// about twice as fast as circl's and can keep a key's precomputed form, which
// we cache below.
//
// The verdicts must be circl's byte for byte, on every crafted input too: a
// server of an older release and one of this release would otherwise disagree
// on a statement a Byzantine client crafted, which is a split.
// TestEd25519VerifiersAgree and FuzzEd25519VerifiersAgree compare both on
// mixed-order keys, R with a torsion component, S + L, non-canonical R and
// arbitrary bytes. Batch verification is not used: voi batches only under the
// cofactored equation, which accepts signatures with a torsioned R that this
// rule refuses (docs/performance.md, round four).
var ed25519Rule = &voied.Options{Verify: voied.VerifyOptionsStdLib}

// ed25519Bytes copies an Ed25519 key's bytes, nil for another scheme.
func ed25519Bytes(k PublicKey) *[32]byte {
	if k.Scheme != Ed25519 || len(k.Key) != voied.PublicKeySize {
		return nil
	}
	b := [32]byte(k.Key)
	return &b
}

// verifyEd25519 decides sig on msg under key.
func verifyEd25519(key *[32]byte, msg, sig []byte) bool {
	if len(sig) != voied.SignatureSize {
		return false
	}
	x := expandedKeys.get(*key)
	if x == nil {
		return false // not a point: no signature verifies under it, as with circl
	}
	return voied.VerifyExpandedWithOptions(x, msg, sig, ed25519Rule)
}

// expandedGeneration bounds the cache: two generations of this many keys,
// each about 1.5 KiB, so at most 6 MiB whatever keys a flood of clients
// brings, and given back within two ages once it stops (AgeCaches). A
// server verifies under its peers' keys and those of the clients with live
// sessions, far fewer in any deployment we size for.
const expandedGeneration = 2048

// keyCache maps a key's bytes to its precomputed form (nil for bytes that
// are no point). Safe for concurrent use; the form is immutable once made.
// INVARIANT: an entry is NewExpandedPublicKey of its key (nil on error).
type keyCache struct {
	generations[*voied.ExpandedPublicKey]
	misses atomic.Uint64 // keys expanded, for tests
}

var expandedKeys = newKeyCache()

func newKeyCache() *keyCache {
	return &keyCache{generations: generations[*voied.ExpandedPublicKey]{size: expandedGeneration}}
}

func (c *keyCache) get(k [32]byte) *voied.ExpandedPublicKey {
	if x, ok := c.generations.get(k); ok {
		return x
	}
	c.misses.Add(1)
	x, err := voied.NewExpandedPublicKey(k[:])
	if err != nil {
		x = nil // not a point: nothing verifies under it
	}
	c.put(k, x)
	return x
}
