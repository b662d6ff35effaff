package wire

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"

	"github.com/bq-lock/bq/crypto"
)

// Forward-secure endorsement keys (docs/protocol.md change 64). A member
// endorses epoch N with a key of its own for N alone, not with its signing
// key, and destroys that key once it endorsed N or holds N: its signing key
// may leak once an epoch leaves it out (change 47), and it would otherwise
// endorse, with q others leaked alike, a fake epoch N that a client starting
// from an older epoch adopts. Each member's keys are the leaves of a Merkle
// tree whose root the epoch that brings the member in names (the cluster
// file for the first members): leaf i endorses epoch First+i. Leaf i's
// Ed25519 seed comes from a hash chain, s_{i+1} = H(s_i), of which the
// member keeps only the seed of the first leaf it may still sign: the seeds
// before it cannot be computed back.

// MaxEndorseLeaves bounds a member's endorsement keys: the epochs it may
// endorse in its life.
const MaxEndorseLeaves = 1 << 16

// DefaultEndorseLeaves is how many endorsement keys bqserver gives a member:
// a change a week for twenty years.
const DefaultEndorseLeaves = 1 << 10

// EndorseKeys is what an epoch says of a member's endorsement keys: the root
// of their tree, the epoch number its first leaf endorses, and how many
// leaves it has (a power of two).
type EndorseKeys struct {
	Root  [32]byte `cbor:"1,keyasint"`
	First uint64   `cbor:"2,keyasint"`
	Count uint32   `cbor:"3,keyasint"`
}

// Check reports what is wrong with k as an epoch names it.
func (k *EndorseKeys) Check() error {
	if k.Count == 0 || k.Count > MaxEndorseLeaves || k.Count&(k.Count-1) != 0 {
		return fmt.Errorf("%d endorsement keys (a power of two, at most %d)", k.Count, MaxEndorseLeaves)
	}
	if k.First == 0 || k.First > ^uint64(0)-uint64(k.Count) {
		return fmt.Errorf("endorsement keys from epoch %d", k.First)
	}
	return nil
}

// Last is the highest epoch number these keys endorse.
func (k *EndorseKeys) Last() uint64 { return k.First + uint64(k.Count) - 1 }

// OneTimeProof is the leaf key that signed an endorsement and its path to
// the member's root, leaf first.
type OneTimeProof struct {
	Key  []byte     `cbor:"1,keyasint"` // Ed25519, 32 bytes
	Path [][32]byte `cbor:"2,keyasint"`
}

func leafHash(pub []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte("bq/v1/endorse-leaf\x00"))
	h.Write(pub)
	return [32]byte(h.Sum(nil))
}

func nodeHash(l, r [32]byte) [32]byte {
	h := sha256.New()
	h.Write([]byte("bq/v1/endorse-node\x00"))
	h.Write(l[:])
	h.Write(r[:])
	return [32]byte(h.Sum(nil))
}

// nextSeed is the seed of the leaf after the one of seed s.
func nextSeed(s [32]byte) [32]byte {
	h := sha256.New()
	h.Write([]byte("bq/v1/endorse-chain\x00"))
	h.Write(s[:])
	return [32]byte(h.Sum(nil))
}

// leafKey is the Ed25519 key of the leaf whose seed is s.
func leafKey(s [32]byte) ed25519.PrivateKey {
	h := sha256.New()
	h.Write([]byte("bq/v1/endorse-key\x00"))
	h.Write(s[:])
	return ed25519.NewKeyFromSeed(h.Sum(nil))
}

// verifyPath reports whether path leads from the leaf of pub at index leaf
// to root in a tree of count leaves.
func verifyPath(root [32]byte, count uint32, leaf uint32, pub []byte, path [][32]byte) bool {
	if len(path) != bits.TrailingZeros32(count) || leaf >= count {
		return false
	}
	h := leafHash(pub)
	for _, sib := range path {
		if leaf&1 == 0 {
			h = nodeHash(h, sib)
		} else {
			h = nodeHash(sib, h)
		}
		leaf >>= 1
	}
	return h == root
}

// verifyOneTime checks that proof's key is leaf n−First of keys.
func (k *EndorseKeys) verifyOneTime(n uint64, proof *OneTimeProof) error {
	if n < k.First || n > k.Last() {
		return fmt.Errorf("its endorsement keys cover epochs %d to %d, not %d", k.First, k.Last(), n)
	}
	if len(proof.Key) != ed25519.PublicKeySize || !verifyPath(k.Root, k.Count, uint32(n-k.First), proof.Key, proof.Path) {
		return errors.New("its one-time key is not its key for the epoch")
	}
	return nil
}

// Endorser is a member's private side of its endorsement keys: every
// leaf's public key (public), the first leaf it may still sign, and that
// leaf's seed (secret).
// INVARIANT: len(leaves) == keys.Count; next ≤ keys.Count; seed is leaf
// next's (unused once next == keys.Count).
type Endorser struct {
	keys   EndorseKeys
	leaves [][32]byte
	next   uint32
	seed   [32]byte
}

// NewEndorser makes the endorsement keys of a member whose first endorsed
// epoch is first: count leaves from a random seed.
func NewEndorser(rand io.Reader, first uint64, count uint32) (*Endorser, error) {
	var s0 [32]byte
	if _, err := io.ReadFull(rand, s0[:]); err != nil {
		return nil, err
	}
	e := &Endorser{keys: EndorseKeys{First: first, Count: count}, seed: s0, leaves: make([][32]byte, count)}
	if err := e.keys.Check(); err != nil {
		return nil, fmt.Errorf("wire: %w", err)
	}
	s := s0
	for i := range e.leaves {
		e.leaves[i] = [32]byte(leafKey(s).Public().(ed25519.PublicKey))
		s = nextSeed(s)
	}
	e.keys.Root = rootOf(e.leaves)
	return e, nil
}

func rootOf(leaves [][32]byte) [32]byte {
	level := make([][32]byte, len(leaves))
	for i, l := range leaves {
		level[i] = leafHash(l[:])
	}
	for len(level) > 1 {
		up := make([][32]byte, len(level)/2)
		for i := range up {
			up[i] = nodeHash(level[2*i], level[2*i+1])
		}
		level = up
	}
	return level[0]
}

// pathOf is leaf i's path to the root.
func pathOf(leaves [][32]byte, i uint32) [][32]byte {
	level := make([][32]byte, len(leaves))
	for j, l := range leaves {
		level[j] = leafHash(l[:])
	}
	var path [][32]byte
	for len(level) > 1 {
		path = append(path, level[i^1])
		up := make([][32]byte, len(level)/2)
		for j := range up {
			up[j] = nodeHash(level[2*j], level[2*j+1])
		}
		level, i = up, i/2
	}
	return path
}

// Clone is a copy with a state of its own (nil for nil).
func (e *Endorser) Clone() *Endorser {
	if e == nil {
		return nil
	}
	c := *e
	return &c
}

// Keys is what an epoch names of this member's endorsement keys.
func (e *Endorser) Keys() EndorseKeys { return e.keys }

// Next is the lowest epoch number this member may still endorse.
func (e *Endorser) Next() uint64 { return e.keys.First + uint64(e.next) }

// Sign endorses epoch n, signed as epoch, with its one-time key, and
// destroys every key up to n's (Forget): a member endorses one epoch of a
// number. The caller persists State before the endorsement leaves.
func (e *Endorser) Sign(cluster ClusterID, self ServerID, n uint64, epoch crypto.Signed) (SignedEndorsement, error) {
	if n < e.Next() || n > e.keys.Last() {
		return SignedEndorsement{}, fmt.Errorf("wire: no endorsement key for epoch %d: this member's keys cover %d to %d and those before %d are destroyed",
			n, e.keys.First, e.keys.Last(), e.Next())
	}
	s := e.seed
	for i := e.next; i < uint32(n-e.keys.First); i++ {
		s = nextSeed(s)
	}
	priv, err := crypto.PrivateKeyFromSeed(crypto.Ed25519, leafKey(s).Seed())
	if err != nil {
		return SignedEndorsement{}, err
	}
	signed, err := crypto.Seal(priv, crypto.DomainEndorsement, &EndorsementBody{Cluster: cluster, Number: n, Hash: EpochHash(epoch), Server: self})
	if err != nil {
		return SignedEndorsement{}, err
	}
	leaf := uint32(n - e.keys.First)
	e.Forget(n)
	return SignedEndorsement{Server: self, Signed: signed,
		OneTime: &OneTimeProof{Key: append([]byte(nil), e.leaves[leaf][:]...), Path: pathOf(e.leaves, leaf)}}, nil
}

// Forget destroys the keys of every epoch up to upTo, and reports whether it
// destroyed any: the caller persists State.
func (e *Endorser) Forget(upTo uint64) bool {
	if upTo < e.Next() {
		return false
	}
	target := e.keys.Count
	if upTo < e.keys.Last() {
		target = uint32(upTo-e.keys.First) + 1
	}
	for e.next < target {
		e.seed = nextSeed(e.seed)
		e.next++
	}
	if e.next == e.keys.Count {
		e.seed = [32]byte{} // every key used or destroyed
	}
	return true
}

// endorserState is the secret part's encoding: "bqek" ‖ next ‖ seed.
const endorserStateSize = 4 + 4 + 32

// State is the secret part, to persist: the next leaf and its seed. It has
// a fixed size, so a file that keeps it is overwritten in place.
func (e *Endorser) State() []byte {
	b := make([]byte, 0, endorserStateSize)
	b = append(b, "bqek"...)
	b = binary.BigEndian.AppendUint32(b, e.next)
	return append(b, e.seed[:]...)
}

// Leaves is the public part, to persist once: every leaf's key.
func (e *Endorser) Leaves() []byte {
	out := make([]byte, 0, 32*len(e.leaves))
	for _, l := range e.leaves {
		out = append(out, l[:]...)
	}
	return out
}

// LoadEndorser rebuilds a member's endorser from its keys (as its epoch
// names them), its leaves and its state, checking each against the others.
func LoadEndorser(keys EndorseKeys, leaves, state []byte) (*Endorser, error) {
	if err := keys.Check(); err != nil {
		return nil, fmt.Errorf("wire: endorsement keys: %w", err)
	}
	if len(leaves) != 32*int(keys.Count) {
		return nil, fmt.Errorf("wire: endorsement keys: %d bytes of leaves for %d keys", len(leaves), keys.Count)
	}
	e := &Endorser{keys: keys, leaves: make([][32]byte, keys.Count)}
	for i := range e.leaves {
		e.leaves[i] = [32]byte(leaves[32*i : 32*i+32])
	}
	if rootOf(e.leaves) != keys.Root {
		return nil, errors.New("wire: endorsement keys: the leaves are not of the root the epoch names")
	}
	if err := e.SetState(state); err != nil {
		return nil, err
	}
	return e, nil
}

// SetState puts back a persisted state; one that would bring back a
// destroyed key (a leaf before the one held) is refused.
func (e *Endorser) SetState(state []byte) error {
	if len(state) != endorserStateSize || string(state[:4]) != "bqek" {
		return fmt.Errorf("wire: endorsement key state of %d bytes", len(state))
	}
	next := binary.BigEndian.Uint32(state[4:8])
	if next > e.keys.Count {
		return fmt.Errorf("wire: endorsement key state at leaf %d of %d", next, e.keys.Count)
	}
	seed := [32]byte(state[8:])
	if next < e.keys.Count && [32]byte(leafKey(seed).Public().(ed25519.PublicKey)) != e.leaves[next] {
		return errors.New("wire: the endorsement key state is not of these keys")
	}
	e.next, e.seed = next, seed
	return nil
}
