package certs

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// Epochs on disk (docs/protocol.md changes 43 and 48). The cluster file is
// epoch 0; each later epoch, signed by the cluster CA and endorsed by q
// members of the one before, is one file DIR/epochs/<n>.epoch beside it,
// written by `bqserver server add`, `remove`, `replace` and `push` once the
// members endorsed it; until then it is a proposal, DIR/epochs/<n>.proposal
// (with the operator's approval and the endorsements gathered so far). A
// server and a client read the epochs when they start; they also learn them
// from the cluster, so a file that lacks the newest is out of date, never
// wrong.

// EpochsDirName is the directory of the signed epochs, beside the cluster file.
const EpochsDirName = "epochs"

// epochPEMType is the PEM block type of an epoch file; its body is the CBOR
// of the signed epoch with its endorsements (a wire.Epoch).
const epochPEMType = "BQ EPOCH"

// proposalPEMType is the PEM block type of a proposal file; its body is the
// CBOR of a wire.Endorse.
const proposalPEMType = "BQ PROPOSED EPOCH"

// EpochPath is the file of epoch n in cluster directory dir.
func EpochPath(dir string, n uint64) string {
	return filepath.Join(dir, EpochsDirName, strconv.FormatUint(n, 10)+".epoch")
}

// ProposalPath is the file of proposed epoch n in cluster directory dir.
func ProposalPath(dir string, n uint64) string {
	return filepath.Join(dir, EpochsDirName, strconv.FormatUint(n, 10)+".proposal")
}

// WriteEpoch writes epoch n into dir's epochs directory, never overwriting:
// a second epoch with one number is the operator's error.
func WriteEpoch(dir string, n uint64, ep wire.Epoch) error {
	b, err := crypto.Marshal(&ep)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, EpochsDirName), 0o755); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	w := &writer{}
	w.file(EpochPath(dir, n), pem.EncodeToMemory(&pem.Block{Type: epochPEMType, Bytes: b}), 0o644)
	w.syncDir(filepath.Join(dir, EpochsDirName))
	return w.err
}

// WriteProposal writes (or rewrites, as endorsements come) proposed epoch n
// into dir's epochs directory.
func WriteProposal(dir string, n uint64, p *wire.Endorse) error {
	b, err := crypto.Marshal(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, EpochsDirName), 0o755); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	path := ProposalPath(dir, n)
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	w := &writer{}
	w.file(tmp, pem.EncodeToMemory(&pem.Block{Type: proposalPEMType, Bytes: b}), 0o644)
	if w.err != nil {
		return w.err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	w.syncDir(filepath.Join(dir, EpochsDirName))
	return w.err
}

// ReadProposal reads proposed epoch n of dir; false if there is none.
func ReadProposal(dir string, n uint64) (*wire.Endorse, bool, error) {
	path := ProposalPath(dir, n)
	data, err := readLimited(path, 4*wire.MaxEpochBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("certs: %s: %w", path, err)
	}
	der, err := decodeOnePEM(data, proposalPEMType)
	if err != nil {
		return nil, false, fmt.Errorf("certs: %s: %v", path, err)
	}
	var p wire.Endorse
	if err := crypto.Unmarshal(der, &p); err != nil {
		return nil, false, fmt.Errorf("certs: %s: not a proposed epoch: %v", path, err)
	}
	return &p, true, nil
}

// Complete writes endorsed epoch n into dir in place of its proposal, then
// puts a rotation's new CA keys in place of the old (their epoch now
// counts: LoadCA and LoadClientCA take either file meanwhile).
func Complete(dir string, n uint64, ep wire.Epoch) error {
	if err := WriteEpoch(dir, n, ep); err != nil {
		return err
	}
	_ = os.Remove(ProposalPath(dir, n))
	for _, k := range [][2]string{{caNextKeyFile, CAKeyFile}, {clientCANextKeyFile, ClientCAKeyFile}, {operatorNextKeyFile, OperatorKeyFile}} {
		next := filepath.Join(dir, CADirName, k[0])
		if _, err := os.Stat(next); err != nil {
			continue
		}
		if err := os.Rename(next, filepath.Join(dir, CADirName, k[1])); err != nil {
			return fmt.Errorf("certs: epoch %d is written, but the new key stays in %s: %w", n, next, err)
		}
	}
	return nil
}

// ReadEpochs reads the endorsed epochs of cluster directory dir, oldest
// first (none if it has no epochs directory). It does not verify them: a
// Chain does, against the cluster file.
func ReadEpochs(dir string) ([]wire.Epoch, error) {
	edir := filepath.Join(dir, EpochsDirName)
	ents, err := os.ReadDir(edir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("certs: reading %s: %w", edir, err)
	}
	type numbered struct {
		n uint64
		e wire.Epoch
	}
	var out []numbered
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".epoch")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(name, 10, 64)
		path := filepath.Join(edir, e.Name())
		if err != nil || n == 0 {
			return nil, fmt.Errorf("certs: %s: an epoch file is named <number ≥ 1>.epoch", path)
		}
		data, err := readLimited(path, 2*wire.MaxEpochBytes)
		if err != nil {
			return nil, fmt.Errorf("certs: %s: %w", path, err)
		}
		der, err := decodeOnePEM(data, epochPEMType)
		if err != nil {
			return nil, fmt.Errorf("certs: %s: %v", path, err)
		}
		var ep wire.Epoch
		if err := crypto.Unmarshal(der, &ep); err != nil {
			return nil, fmt.Errorf("certs: %s: not an endorsed epoch (an epoch file written before protocol 1.8 has no endorsements: docs/protocol.md change 49): %v", path, err)
		}
		out = append(out, numbered{n, ep})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n < out[j].n })
	epochs := make([]wire.Epoch, len(out))
	for i, e := range out {
		if e.n != uint64(i+1) {
			return nil, fmt.Errorf("certs: %s: epoch %d is missing (epochs are consecutive from 1); copy every file of the operator's %s directory",
				edir, i+1, EpochsDirName)
		}
		epochs[i] = e.e
	}
	return epochs, nil
}

// CAKey is the cluster CA's key as the protocol verifies epochs with it.
func (c *Cluster) CAKey() *crypto.Parsed {
	pub, ok := c.CA.PublicKey.(ed25519.PublicKey)
	if !ok {
		panic("certs: a loaded cluster has a CA key that is not Ed25519") // parseCluster checked it
	}
	k, err := crypto.PublicKey{Scheme: crypto.Ed25519, Key: []byte(pub)}.Parse()
	if err != nil {
		panic(fmt.Sprintf("certs: the cluster CA key does not parse: %v", err))
	}
	return k
}

// EpochSigner is the CA's key as it signs epochs (wire.SignEpoch).
func (ca *CA) EpochSigner() (*crypto.PrivateKey, error) {
	return crypto.PrivateKeyFromSeed(crypto.Ed25519, ca.Key.Seed())
}

// ChainIn is the cluster's chain with the epochs of cluster directory dir,
// verified, and those epochs.
func (c *Cluster) ChainIn(dir string) (*wire.Chain, []wire.Epoch, error) {
	epochs, err := ReadEpochs(dir)
	if err != nil {
		return nil, nil, err
	}
	chain := c.Chain()
	if _, err := chain.Extend(epochs); err != nil {
		return nil, nil, fmt.Errorf("certs: %s does not continue %s: %w", filepath.Join(dir, EpochsDirName), ClusterFileName, err)
	}
	return chain, epochs, nil
}

// Chain starts the cluster's chain of epochs at its cluster file.
func (c *Cluster) Chain() *wire.Chain {
	return wire.NewChain(c.CAKey(), c.F, c.Keyring())
}

// Members is one epoch's servers as a runtime dials them: id, address and
// TLS certificate.
type Members struct {
	Epoch   uint64
	Servers []Member
}

// Member is one server of an epoch.
type Member struct {
	ID      wire.ServerID
	Address string
	Cert    *x509.Certificate
}

// MembersOf returns the members of epoch e of chain (of this cluster).
func (c *Cluster) MembersOf(chain *wire.Chain, e uint64) (Members, error) {
	out := Members{Epoch: e}
	if e == 0 {
		for _, s := range c.Servers {
			out.Servers = append(out.Servers, Member{ID: s.ID, Address: s.Address, Cert: s.Cert})
		}
		return out, nil
	}
	b := chain.Body(e)
	if b == nil {
		return Members{}, fmt.Errorf("certs: epoch %d is not held", e)
	}
	for _, m := range b.Members {
		cert, err := x509.ParseCertificate(m.Cert)
		if err != nil {
			return Members{}, fmt.Errorf("certs: epoch %d: the certificate of %s: %w", e, m.ID, err)
		}
		out.Servers = append(out.Servers, Member{ID: m.ID, Address: m.Address, Cert: cert})
	}
	return out, nil
}

// Addresses maps the members' ids to their addresses.
func (m Members) Addresses() map[wire.ServerID]string {
	out := make(map[wire.ServerID]string, len(m.Servers))
	for _, s := range m.Servers {
		out[s.ID] = s.Address
	}
	return out
}

// ByCert returns the member whose certificate is exactly cert.
func (m Members) ByCert(cert *x509.Certificate) (wire.ServerID, bool) {
	if cert == nil {
		return 0, false
	}
	for _, s := range m.Servers {
		if bytes.Equal(s.Cert.Raw, cert.Raw) {
			return s.ID, true
		}
	}
	return 0, false
}

// Member returns member id, if it is one.
func (m Members) Member(id wire.ServerID) (Member, bool) {
	for _, s := range m.Servers {
		if s.ID == id {
			return s, true
		}
	}
	return Member{}, false
}

// Union is the members of m and o (o's entry wins for an id in both).
func (m Members) Union(o Members) Members {
	out := Members{Epoch: max(m.Epoch, o.Epoch)}
	seen := map[wire.ServerID]bool{}
	for _, s := range o.Servers {
		seen[s.ID] = true
		out.Servers = append(out.Servers, s)
	}
	for _, s := range m.Servers {
		if !seen[s.ID] {
			out.Servers = append(out.Servers, s)
		}
	}
	sort.Slice(out.Servers, func(i, j int) bool { return out.Servers[i].ID < out.Servers[j].ID })
	return out
}

// NewMemberOptions describe a server an epoch adds (server add, replace).
type NewMemberOptions struct {
	ID   wire.ServerID
	Host string // its host; with Port, its address
	Port int
	// Epoch is the epoch that brings it in: its endorsement keys start at
	// the next (docs/protocol.md change 64).
	Epoch uint64
}

// NewMember is a new server's public entry and its private files.
type NewMember struct {
	Entry                     wire.EpochMember
	tlsKey                    []byte
	tlsCert                   []byte
	signing                   []byte
	endorseKey, endorseLeaves []byte
}

// IssueMember makes a new server's keys and certificate (as Init makes each
// server's) for cluster c under ca.
func (ca *CA) IssueMember(c *Cluster, opts NewMemberOptions, now time.Time, rand io.Reader) (*NewMember, error) {
	if err := checkHost(opts.Host); err != nil {
		return nil, err
	}
	if opts.Port < 1 || opts.Port > 65535 {
		return nil, fmt.Errorf("certs: port %d is outside 1..65535", opts.Port)
	}
	der, key, err := ca.IssueServer(int(opts.ID), certHostsFor(opts.Host), now, rand)
	if err != nil {
		return nil, err
	}
	sk, err := crypto.GenerateKey(c.Scheme, rand)
	if err != nil {
		return nil, fmt.Errorf("certs: generating the signing key of server %d: %w", opts.ID, err)
	}
	keyPEM, err := encodePKCS8(key)
	if err != nil {
		return nil, err
	}
	en, err := newEndorser(rand, opts.Epoch+1)
	if err != nil {
		return nil, err
	}
	ek := en.Keys()
	return &NewMember{
		Entry: wire.EpochMember{ID: opts.ID, Address: net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)),
			Key: sk.Public.Wire, Cert: der, Endorse: &ek},
		tlsKey: keyPEM, tlsCert: []byte(certPEM(der)), signing: encodeSigningKey(sk),
		endorseKey: en.State(), endorseLeaves: en.Leaves(),
	}, nil
}

// Write writes the new server's private files into DIR/server-<id>/, as
// Init does, never overwriting.
func (m *NewMember) Write(dir string) error {
	sdir := ServerDir(dir, int(m.Entry.ID))
	w := &writer{}
	w.mkdir(sdir)
	w.file(filepath.Join(sdir, TLSKeyFile), m.tlsKey, 0o600)
	w.file(filepath.Join(sdir, TLSCertFile), m.tlsCert, 0o600)
	w.file(filepath.Join(sdir, SigningKeyFile), m.signing, 0o600)
	w.file(filepath.Join(sdir, EndorseKeyFile), m.endorseKey, 0o600)
	w.file(filepath.Join(sdir, EndorseLeavesFile), m.endorseLeaves, 0o644)
	w.syncDir(dir)
	if w.err != nil {
		w.undo()
	}
	return w.err
}

// Roster is who a running server or client talks to as the cluster's epochs
// change (docs/protocol.md change 43): the members of the newest epoch it
// knows, of the one before it (whose state the newest copies) and of the one
// it serves (to which a sealed server still hands its state). Its owner
// recomputes it (Follow) when it adopts an epoch; the transport reads it on
// its own goroutines (ServerByCert) to know which certificate is whose.
type Roster struct {
	cluster *Cluster
	// known is the current table; epoch the newest epoch it was made for.
	// INVARIANT: known holds every member of the epochs Follow was last
	// given, and no other server.
	known atomic.Pointer[Members]
	epoch uint64
	// pool is every cluster CA of the chain last followed (CAPoolOf).
	pool atomic.Pointer[x509.CertPool]
}

// NewRoster starts a roster at the cluster file.
func NewRoster(c *Cluster) *Roster {
	r := &Roster{cluster: c}
	zero, _ := c.MembersOf(nil, 0)
	r.known.Store(&zero)
	r.pool.Store(c.CAPool())
	return r
}

// ServerByCert maps a presented certificate to its server (transport.IdentifyServer).
func (r *Roster) ServerByCert(cert *x509.Certificate) (wire.ServerID, bool) {
	return r.known.Load().ByCert(cert)
}

// Follow recomputes the table for a chain that now knows epoch knows, to
// hold the members of knows and of each epoch of with. It reports whether
// the table changed. Only one goroutine may call it.
func (r *Roster) Follow(chain *wire.Chain, knows uint64, with ...uint64) (bool, error) {
	if chain == nil || knows == r.epoch {
		return false, nil
	}
	var table Members
	for _, e := range append(with, knows) {
		one, err := r.cluster.MembersOf(chain, e)
		if err != nil {
			return false, err
		}
		table = table.Union(one)
	}
	table.Epoch = knows
	r.known.Store(&table)
	r.pool.Store(r.cluster.CAPoolOf(chain))
	r.epoch = knows
	return true, nil
}

// CAPool is every cluster CA of the chain last followed: what verifies a
// member's TLS certificate (an exact match with its epoch says whose it is).
func (r *Roster) CAPool() *x509.CertPool { return r.pool.Load() }

// Addresses is every server of the table but self (nil: none left out), by id.
func (r *Roster) Addresses(self *wire.ServerID) map[wire.ServerID]string {
	out := r.known.Load().Addresses()
	if self != nil {
		delete(out, *self)
	}
	return out
}

// CAInForce is the cluster CA that signs chain's next epoch, and the epoch
// whose body named it (0: the cluster file's).
func (c *Cluster) CAInForce(chain *wire.Chain) (*x509.Certificate, uint64) {
	for e := chain.Number(); e >= 1; e-- {
		if der := chain.Body(e).NextCA; len(der) > 0 {
			cert, err := x509.ParseCertificate(der)
			if err != nil {
				panic(fmt.Sprintf("certs: a verified epoch names an unparsable CA: %v", err)) // the chain parsed it
			}
			return cert, e
		}
	}
	return c.CA, 0
}

// IssuerOf is the cluster CA of chain (the cluster file's or one a
// rotation named) that issued leaf, and whether it is the one in force: a
// member's certificate depends on its issuer to its end, so after a
// rotation a member not yet replaced still expires with the old CA (nil if
// no CA of chain issued leaf).
func (c *Cluster) IssuerOf(chain *wire.Chain, leaf *x509.Certificate) (issuer *x509.Certificate, inForce bool) {
	inForceCA := c.CA
	if chain != nil {
		inForceCA, _ = c.CAInForce(chain)
	}
	cas := []*x509.Certificate{c.CA}
	for e := uint64(1); chain != nil && e <= chain.Number(); e++ {
		if der := chain.Body(e).NextCA; len(der) > 0 {
			if cert, err := x509.ParseCertificate(der); err == nil {
				cas = append(cas, cert)
			}
		}
	}
	for _, ca := range cas {
		if leaf.CheckSignatureFrom(ca) == nil {
			return ca, ca.Equal(inForceCA)
		}
	}
	return nil, false
}

// CAPoolOf is every cluster CA of chain: the cluster file's and each one a
// rotation named. A member's TLS certificate is issued by the CA in force
// when it was added, and stays valid to its end.
func (c *Cluster) CAPoolOf(chain *wire.Chain) *x509.CertPool {
	p := c.CAPool()
	for e := uint64(1); chain != nil && e <= chain.Number(); e++ {
		if der := chain.Body(e).NextCA; len(der) > 0 {
			if cert, err := x509.ParseCertificate(der); err == nil {
				p.AddCert(cert)
			}
		}
	}
	return p
}

// Newest reads the epochs of cluster directory dir (of cluster c) and
// returns its chain, the members of its newest epoch and every cluster CA
// of it: who an operator's command talks to.
func (c *Cluster) Newest(dir string) (*wire.Chain, Members, *x509.CertPool, error) {
	chain, _, err := c.ChainIn(dir)
	if err != nil {
		return nil, Members{}, nil, err
	}
	m, err := c.MembersOf(chain, chain.Number())
	if err != nil {
		return nil, Members{}, nil, err
	}
	return chain, m, c.CAPoolOf(chain), nil
}
