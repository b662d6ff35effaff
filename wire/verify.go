package wire

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/bq-lock/bq/crypto"
)

// Keyring is what a verifier needs to know of its cluster: the servers'
// signing keys, indexed by ServerID, and the cluster's id, which every signed
// body must name (docs/protocol.md §1, cluster binding).
// INVARIANT: Cluster == ClusterIDOf(f, Servers) for the f it was made with
// (epoch 0, the cluster file); in a later epoch Cluster stays epoch 0's and
// Servers are that epoch's members (docs/protocol.md change 43).
type Keyring struct {
	Cluster ClusterID
	// Epoch is the configuration Servers belong to: every View and vote
	// verified with this keyring must name it.
	Epoch   uint64
	Servers []*crypto.Parsed
	// Endorse are the members' endorsement keys by id (change 64), where
	// their epoch names them; nil for a member without (a cluster made
	// before change 64), which endorses with its signing key.
	Endorse []*EndorseKeys
}

// EndorseKeysOf returns server id's endorsement keys, or nil.
func (k Keyring) EndorseKeysOf(id ServerID) *EndorseKeys {
	if int(id) >= len(k.Endorse) {
		return nil
	}
	return k.Endorse[id]
}

// NewKeyring makes the keyring of a cluster of len(servers) servers that
// tolerates f faulty ones; its Cluster is ClusterIDOf(f, servers).
func NewKeyring(f int, servers []*crypto.Parsed) Keyring {
	return Keyring{Cluster: ClusterIDOf(f, servers), Servers: servers}
}

// Len is n, the number of servers: ids with a key (after a change, the
// ids of an epoch need not be 0..n−1).
func (k Keyring) Len() int {
	n := 0
	for _, s := range k.Servers {
		if s != nil {
			n++
		}
	}
	return n
}

// Key returns the key of server id, or nil if there is no such server.
func (k Keyring) Key(id ServerID) *crypto.Parsed {
	if int(id) >= len(k.Servers) {
		return nil
	}
	return k.Servers[id]
}

// ClusterIDOf is the id of the cluster of len(servers) servers, f of them
// tolerated faulty, with these signing keys in id order: SHA-256 over a
// domain tag, n, f and every key's scheme and bytes, each length-prefixed. A
// key used with two clusters signs statements that verify in one only.
func ClusterIDOf(f int, servers []*crypto.Parsed) ClusterID {
	h := sha256.New()
	h.Write([]byte("bq/v1/cluster\x00"))
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(servers)))
	h.Write(n[:])
	binary.BigEndian.PutUint64(n[:], uint64(f))
	h.Write(n[:])
	for _, k := range servers {
		var part [][]byte
		if k != nil {
			part = [][]byte{[]byte(k.Wire.Scheme), k.Wire.Key}
		} else {
			part = [][]byte{nil, nil}
		}
		for _, b := range part {
			binary.BigEndian.PutUint32(n[:4], uint32(len(b)))
			h.Write(n[:4])
			h.Write(b)
		}
	}
	var id ClusterID
	h.Sum(id[:0])
	return id
}

// ErrForeignCluster marks a signed object made for another cluster: a replay
// across clusters (by a faulty server, or a client key used with two), never
// valid here. It wraps ErrInvalid.
var ErrForeignCluster = fmt.Errorf("%w: signed for another cluster", ErrInvalid)

func checkCluster(what string, got, want ClusterID) error {
	if got != want {
		return fmt.Errorf("wire: %w: %s of cluster %s, this is cluster %s", ErrForeignCluster, what, got, want)
	}
	return nil
}

// ErrOtherEpoch marks a View or vote signed in another epoch than the
// verifier's (docs/protocol.md change 43): it does not count here, and it is
// no evidence of anything (its signer may be correct and in another epoch).
var ErrOtherEpoch = fmt.Errorf("%w: signed in another epoch", ErrInvalid)

// peekEpoch reads the epoch of a body that did not verify with this
// keyring (its signer is no member here, or the signature is not its key's):
// one of another epoch is ErrOtherEpoch, not evidence — a member added in a
// later epoch is unknown to a verifier still in an earlier one. An unverified
// epoch decides nothing but which error it is: either way it counts for
// nothing.
func peekEpoch[B any](what string, s crypto.Signed, want uint64, epoch func(*B) uint64) error {
	var b B
	if crypto.Unmarshal(s.Body, &b) != nil {
		return nil
	}
	return checkEpoch(what, epoch(&b), want)
}

func checkEpoch(what string, got, want uint64) error {
	if got != want {
		return fmt.Errorf("wire: %w: %s of epoch %d, this verifier is in epoch %d", ErrOtherEpoch, what, got, want)
	}
	return nil
}

// ErrInvalid marks objects that fail verification: bad signatures, bodies
// that do not decode, or fields that contradict each other. A peer that sends
// one is misbehaving (or relaying misbehaviour).
var ErrInvalid = errors.New("invalid signed object")

func invalid(format string, args ...any) error {
	return fmt.Errorf("wire: %w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// BodyHash is the SHA-256 of a signed statement's body: equal for two
// copies of one statement even under a randomized signature scheme.
func BodyHash(s *SignedStatement) Digest { return sha256.Sum256(s.Signed.Body) }

// Hash identifies a signed statement by its exact parts — scheme, key, body
// and signature, each length-prefixed so no two statements share an input —
// for in-process caches and dedup. It never goes on the wire or to disk.
func (s *SignedStatement) Hash() Digest {
	h := sha256.New()
	var n [4]byte
	for _, part := range [][]byte{[]byte(s.Key.Scheme), s.Key.Key, s.Signed.Body, s.Signed.Sig} {
		binary.BigEndian.PutUint32(n[:], uint32(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var d Digest
	h.Sum(d[:0])
	return d
}

// SignStatement signs st for cluster with the client key k (it sets
// st.Cluster). st.Client must be k's ClientID.
func SignStatement(k *crypto.PrivateKey, cluster ClusterID, st *Statement) (SignedStatement, error) {
	st.Cluster = cluster
	if ClientID(k.Public.ID) != st.Client {
		return SignedStatement{}, errors.New("wire: statement client does not match the signing key")
	}
	body := appendStatement(make([]byte, 0, statementSizeMax+len(st.Lock)), st)
	return SignedStatement{Key: k.Public.Wire, Signed: crypto.Signed{Body: body, Sig: k.Sign(crypto.DomainStatement, body)}}, nil
}

// Verify checks the signature, decodes the body strictly, and checks that the
// statement is of cluster and internally consistent: its client is its key's,
// its lock name is valid, and N and JHash are present exactly where its phase
// needs them.
func (s *SignedStatement) Verify(cluster ClusterID) (*Statement, error) {
	return s.open(cluster, true)
}

// DecodeVouched decodes s and makes the checks of Verify but the
// signature's. Only for a statement
// that f+1 servers sent byte for byte (same Hash): one of them is correct
// and made both checks on these very bytes before it kept them
// (docs/protocol.md change 28), or to order claims that are verified in
// full before they count. Never to believe what one server says.
func (s *SignedStatement) DecodeVouched(cluster ClusterID) (*Statement, error) {
	return s.open(cluster, false)
}

func (s *SignedStatement) open(cluster ClusterID, checkSig bool) (*Statement, error) {
	pub, err := s.Key.Parse()
	if err != nil {
		return nil, invalid("statement key: %v", err)
	}
	if checkSig && !pub.Verify(crypto.DomainStatement, s.Signed.Body, s.Signed.Sig) {
		return nil, invalid("statement: %v (%s)", crypto.ErrBadSignature, crypto.DomainStatement)
	}
	if len(s.Signed.Body) > crypto.MaxMessageSize {
		return nil, invalid("statement: %v", crypto.ErrOversize)
	}
	st, err := decodeStatement(s.Signed.Body)
	if err != nil {
		return nil, invalid("statement: %v", err)
	}
	if ClientID(pub.ID) != st.Client {
		return nil, invalid("statement of %s signed by key of %s", st.Client, ClientID(pub.ID))
	}
	if err := checkLock(st.Lock); err != nil {
		return nil, invalid("statement: %v", err)
	}
	switch st.Phase {
	case PhaseDoorway, PhaseExit:
		if st.N != 0 || st.JHash != nil {
			return nil, invalid("%s carries a ticket", st.Phase)
		}
	case PhaseTicket:
		if st.N == 0 || st.JHash == nil {
			return nil, invalid("Ticket without N or justification hash")
		}
	case PhaseHeld:
		if st.N == 0 || st.JHash != nil {
			return nil, invalid("Held without N, or with a justification hash")
		}
	default:
		return nil, invalid("unknown phase %d", st.Phase)
	}
	if st.N >= TicketCap {
		return nil, invalid("ticket %d is at or above the cap 2^62", st.N)
	}
	if err := HoldingOf(st).check(st.Phase); err != nil {
		return nil, invalid("statement: %v", err)
	}
	if err := checkCluster("statement", st.Cluster, cluster); err != nil {
		return nil, err
	}
	return st, nil
}

// SignView signs v for cluster with server key k (it sets v.Cluster).
func SignView(k *crypto.PrivateKey, cluster ClusterID, v *ViewBody) (SignedView, error) {
	v.Cluster = cluster
	s, err := crypto.Seal(k, crypto.DomainView, v)
	if err != nil {
		return SignedView{}, err
	}
	return SignedView{Server: v.Server, Signed: s}, nil
}

// Verify checks a view's server signature and decodes it. It does not verify
// the member statements inside (callers verify those they use, with a cache).
func (v *SignedView) Verify(keys Keyring) (*ViewBody, error) {
	pub := keys.Key(v.Server)
	if pub == nil {
		if err := peekEpoch[ViewBody]("view", v.Signed, keys.Epoch, func(b *ViewBody) uint64 { return b.Epoch }); err != nil {
			return nil, err
		}
		return nil, invalid("view from unknown server %s", v.Server)
	}
	var body ViewBody
	if err := crypto.Open(pub, crypto.DomainView, v.Signed, &body); err != nil {
		if err := peekEpoch[ViewBody]("view", v.Signed, keys.Epoch, func(b *ViewBody) uint64 { return b.Epoch }); err != nil {
			return nil, err
		}
		return nil, invalid("view by %s: %v", v.Server, err)
	}
	if body.Server != v.Server {
		return nil, invalid("view claims server %s but is signed by %s", body.Server, v.Server)
	}
	if err := checkLock(body.Lock); err != nil {
		return nil, invalid("view: %v", err)
	}
	if err := checkCluster("view", body.Cluster, keys.Cluster); err != nil {
		return nil, err
	}
	if err := checkEpoch("view", body.Epoch, keys.Epoch); err != nil {
		return nil, err
	}
	return &body, nil
}

// JustificationHash is H(J): SHA-256 over the views' exact bytes in order.
func JustificationHash(j []SignedView) Digest {
	h := sha256.New()
	for _, v := range j {
		b, _ := crypto.Marshal(v)
		h.Write(b)
	}
	return Digest(h.Sum(nil))
}

// SignSuspect signs a vote for cluster with server key k (it sets s.Cluster).
func SignSuspect(k *crypto.PrivateKey, cluster ClusterID, s *SuspectBody) (SignedSuspect, error) {
	s.Cluster = cluster
	sg, err := crypto.Seal(k, crypto.DomainSuspect, s)
	if err != nil {
		return SignedSuspect{}, err
	}
	return SignedSuspect{Server: s.Server, Signed: sg}, nil
}

// Verify checks a vote's signature and decodes it.
func (s *SignedSuspect) Verify(keys Keyring) (*SuspectBody, error) {
	pub := keys.Key(s.Server)
	if pub == nil {
		if err := peekEpoch[SuspectBody]("vote", s.Signed, keys.Epoch, func(b *SuspectBody) uint64 { return b.Epoch }); err != nil {
			return nil, err
		}
		return nil, invalid("vote from unknown server %s", s.Server)
	}
	var body SuspectBody
	if err := crypto.Open(pub, crypto.DomainSuspect, s.Signed, &body); err != nil {
		if err := peekEpoch[SuspectBody]("vote", s.Signed, keys.Epoch, func(b *SuspectBody) uint64 { return b.Epoch }); err != nil {
			return nil, err
		}
		return nil, invalid("vote by %s: %v", s.Server, err)
	}
	if body.Server != s.Server {
		return nil, invalid("vote claims server %s but is signed by %s", body.Server, s.Server)
	}
	if body.Reason != SuspectMute && body.Reason != SuspectDoorway {
		return nil, invalid("vote with unknown reason %d", body.Reason)
	}
	if err := checkCluster("vote", body.Cluster, keys.Cluster); err != nil {
		return nil, err
	}
	if err := checkEpoch("vote", body.Epoch, keys.Epoch); err != nil {
		return nil, err
	}
	return &body, nil
}

// Verify checks that the certificate holds valid votes on (Client, Session)
// from at least quorum distinct servers (docs/protocol.md §5).
func (r *ResetCertificate) Verify(keys Keyring, quorum int) error {
	if quorum < 1 {
		return invalid("certificate checked against quorum %d", quorum)
	}
	seen := make(map[ServerID]bool, len(r.Votes))
	for i := range r.Votes {
		body, err := r.Votes[i].Verify(keys)
		if err != nil {
			return err
		}
		if body.Client != r.Client || body.Session != r.Session {
			return invalid("certificate for %s sess=%d holds a vote on %s sess=%d", r.Client, r.Session, body.Client, body.Session)
		}
		if seen[body.Server] {
			return invalid("certificate holds two votes by %s", body.Server)
		}
		seen[body.Server] = true
	}
	if len(seen) < quorum {
		return invalid("certificate has votes from %d servers, needs %d", len(seen), quorum)
	}
	return nil
}

// Epoch is the epoch the certificate's first vote names, read without a
// signature check (0 if it names none or does not decode): which keyring
// to verify it with. Verify then checks every vote against that keyring.
func (r *ResetCertificate) Epoch() uint64 {
	if len(r.Votes) == 0 {
		return 0
	}
	var b SuspectBody
	if crypto.Unmarshal(r.Votes[0].Signed.Body, &b) != nil {
		return 0
	}
	return b.Epoch
}

// JustificationEpoch is the epoch J's first View names, read without a
// signature check (0 if none): which keyring to verify J with.
func JustificationEpoch(j []SignedView) uint64 {
	if len(j) == 0 {
		return 0
	}
	var b ViewBody
	if crypto.Unmarshal(j[0].Signed.Body, &b) != nil {
		return 0
	}
	return b.Epoch
}
