package certs

import (
	"bytes"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// Enrolment of the clients of a closed cluster (docs/protocol.md change 23):
// the operator's record of them is DIR/clients/, one NAME.cert (the
// admission certificate, PEM) per client and one NAME.revoked (the signed
// revocation, PEM) per client thrown out. Servers do not read it: they check
// certificates against the cluster file's client_ca, and learn revocations
// from the Revoke message.

// ClientsDirName is the operator's record of enrolled clients, inside a cluster directory.
const ClientsDirName = "clients"

// DefaultAdmissionValidity is how long a certificate of Enroll is valid
// unless told otherwise.
const DefaultAdmissionValidity = 365 * 24 * time.Hour

// PEM block types of admission certificates and revocations.
const (
	admissionPEMType  = "BQ ADMISSION CERTIFICATE"
	revocationPEMType = "BQ REVOCATION"
)

// EnrollOptions describe one client to enroll.
type EnrollOptions struct {
	Name string
	// Key is the client's public key; its hash is the ClientID certified.
	Key *crypto.Parsed
	// Locks are the lock-name patterns the client may use; none: every name.
	Locks []string
	// MaxHold is the longest it may hold a lock; 0: the cluster's default.
	MaxHold time.Duration
	// Validity is how long the certificate is valid (0: DefaultAdmissionValidity).
	Validity time.Duration
	// Record writes DIR/clients/NAME.cert and refuses a name already
	// enrolled; without it (a short-lived certificate for the operator's
	// own command) nothing is written.
	Record bool
}

// ClientCA is a closed cluster's client CA: its key and its cluster.
type ClientCA struct {
	Cluster *Cluster
	Key     *crypto.PrivateKey
	dir     string
	// inForce admit, ever revoke: the client CAs of the cluster's chain
	// (change 43: a rotation lists the old and the new until every client
	// is renewed).
	inForce, ever []*crypto.Parsed
}

// LoadClientCA reads the cluster file, its epochs and the client CA key of
// the cluster in dir: the newest client CA in force (DIR/ca/client-ca.key,
// or the key a rotation left beside it).
func LoadClientCA(dir string) (*ClientCA, error) {
	c, err := LoadCluster(filepath.Join(dir, ClusterFileName))
	if err != nil {
		return nil, err
	}
	if !c.Closed() {
		return nil, fmt.Errorf("certs: the cluster in %s is open (its cluster file has no client_ca): it admits any key, so there is nothing to enroll or revoke", dir)
	}
	chain, _, err := c.ChainIn(dir)
	if err != nil {
		return nil, err
	}
	inForce, ever := chain.ClientCAs(c.ClientCA)
	var errs []error
	for _, name := range []string{ClientCAKeyFile, clientCANextKeyFile} {
		path := filepath.Join(dir, CADirName, name)
		if _, err := os.Stat(path); name == clientCANextKeyFile && err != nil {
			break
		}
		data, err := readPrivate(path, true)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		k, err := parseSigningKey(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("certs: %s: %v", path, err))
			continue
		}
		if len(inForce) > 0 && k.Public.ID == inForce[len(inForce)-1].ID {
			return &ClientCA{Cluster: c, Key: k, dir: dir, inForce: inForce, ever: ever}, nil
		}
		errs = append(errs, fmt.Errorf("certs: %s is not the key of the newest client CA in force", path))
	}
	return nil, errors.Join(errs...)
}

// clientCANextKeyFile holds a rotation's next client CA key until its
// epoch is written.
const clientCANextKeyFile = "client-ca-next.key"

// CheckClientName reports whether name can name an enrolled client: 1..64
// letters, digits, '-', '_', '.' or '@', not starting with '.'.
func CheckClientName(name string) error {
	if name == "" || len(name) > wire.MaxClientName || strings.HasPrefix(name, ".") ||
		strings.IndexFunc(name, func(r rune) bool {
			return !(unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_.@", r))
		}) >= 0 {
		return fmt.Errorf("client name %q: use 1..%d letters, digits, '-', '_', '.' or '@' (not starting with '.')", name, wire.MaxClientName)
	}
	return nil
}

// Enroll certifies a client key.
func (ca *ClientCA) Enroll(opts EnrollOptions, now time.Time, rand io.Reader) (crypto.Signed, *wire.AdmissionBody, error) {
	if err := CheckClientName(opts.Name); err != nil {
		return crypto.Signed{}, nil, err
	}
	if opts.Key == nil {
		return crypto.Signed{}, nil, errors.New("certs: no client key to certify")
	}
	for _, p := range opts.Locks {
		if err := wire.CheckLockPattern(p); err != nil {
			return crypto.Signed{}, nil, err
		}
	}
	if opts.MaxHold < 0 || opts.Validity < 0 {
		return crypto.Signed{}, nil, errors.New("certs: max hold and validity cannot be negative")
	}
	if opts.Validity == 0 {
		opts.Validity = DefaultAdmissionValidity
	}
	var serial [8]byte
	if _, err := io.ReadFull(rand, serial[:]); err != nil {
		return crypto.Signed{}, nil, fmt.Errorf("certs: %w", err)
	}
	body := &wire.AdmissionBody{
		Serial: binary.BigEndian.Uint64(serial[:]) >> 1, Name: opts.Name, Client: wire.ClientID(opts.Key.ID),
		Locks: opts.Locks, MaxHoldMillis: uint64(opts.MaxHold / time.Millisecond),
		NotBefore: now.Add(-5 * time.Minute).UnixMilli(), // clock skew between this machine and the servers
		NotAfter:  now.Add(opts.Validity).UnixMilli(),
	}
	s, err := wire.SignAdmission(ca.Key, ca.Cluster.ID(), body)
	if err != nil {
		return crypto.Signed{}, nil, err
	}
	if opts.Record {
		dir := filepath.Join(ca.dir, ClientsDirName)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return crypto.Signed{}, nil, fmt.Errorf("certs: %w", err)
		}
		if err := writeNew(filepath.Join(dir, opts.Name+".cert"), EncodeAdmission(s), 0o644); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return crypto.Signed{}, nil, fmt.Errorf("certs: a client named %q is already enrolled (%s); choose another name, or revoke it first and remove the file", opts.Name, filepath.Join(dir, opts.Name+".cert"))
			}
			return crypto.Signed{}, nil, err
		}
	}
	return s, body, nil
}

// Renew certifies the key of the client enrolled as name again, with the
// same lock patterns and max-hold, valid for validity (0:
// DefaultAdmissionValidity) from now, and records the new certificate in
// place of the old (docs/protocol.md change 43, key lifecycle). The old one
// stays valid until its own end: a client switches when it next connects.
// A revoked client is not renewed.
func (ca *ClientCA) Renew(name string, validity time.Duration, now time.Time, rand io.Reader) (crypto.Signed, *wire.AdmissionBody, error) {
	if err := CheckClientName(name); err != nil {
		return crypto.Signed{}, nil, err
	}
	if validity < 0 {
		return crypto.Signed{}, nil, errors.New("certs: validity cannot be negative")
	}
	if validity == 0 {
		validity = DefaultAdmissionValidity
	}
	if _, r, err := ca.revoked(name); err == nil {
		return crypto.Signed{}, nil, fmt.Errorf("certs: client %q was revoked on %s: a revoked client is not renewed (enroll its new key under another name)",
			name, time.UnixMilli(r.At).UTC().Format(time.RFC3339))
	}
	old, err := ca.enrolled(name)
	if err != nil {
		return crypto.Signed{}, nil, err
	}
	var serial [8]byte
	if _, err := io.ReadFull(rand, serial[:]); err != nil {
		return crypto.Signed{}, nil, fmt.Errorf("certs: %w", err)
	}
	body := &wire.AdmissionBody{
		Serial: binary.BigEndian.Uint64(serial[:]) >> 1, Name: old.Name, Client: old.Client,
		Locks: old.Locks, MaxHoldMillis: old.MaxHoldMillis,
		NotBefore: now.Add(-5 * time.Minute).UnixMilli(), // clock skew between this machine and the servers
		NotAfter:  now.Add(validity).UnixMilli(),
	}
	s, err := wire.SignAdmission(ca.Key, ca.Cluster.ID(), body)
	if err != nil {
		return crypto.Signed{}, nil, err
	}
	path := filepath.Join(ca.dir, ClientsDirName, name+".cert")
	tmp := path + ".renew"
	_ = os.Remove(tmp) // left by an interrupted renew
	if err := writeNew(tmp, EncodeAdmission(s), 0o644); err != nil {
		return crypto.Signed{}, nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return crypto.Signed{}, nil, fmt.Errorf("certs: %w", err)
	}
	return s, body, nil
}

// Revoke signs the revocation of the client enrolled as name and records it
// (DIR/clients/NAME.revoked). Revoking again returns the recorded one.
func (ca *ClientCA) Revoke(name string, now time.Time) (crypto.Signed, *wire.RevocationBody, error) {
	if err := CheckClientName(name); err != nil {
		return crypto.Signed{}, nil, err
	}
	dir := filepath.Join(ca.dir, ClientsDirName)
	revPath := filepath.Join(dir, name+".revoked")
	if data, err := readLimited(revPath, maxKeyFileSize); err == nil {
		s, err := decodePEMSigned(data, revocationPEMType)
		if err != nil {
			return crypto.Signed{}, nil, fmt.Errorf("certs: %s: %v", revPath, err)
		}
		r, err := wire.VerifyRevocationAny(ca.ever, ca.Cluster.ID(), s)
		if err != nil {
			return crypto.Signed{}, nil, fmt.Errorf("certs: %s: %v", revPath, err)
		}
		return s, r, nil
	}
	adm, err := ca.enrolled(name)
	if err != nil {
		return crypto.Signed{}, nil, err
	}
	body := &wire.RevocationBody{Client: adm.Client, Name: name, At: now.UnixMilli()}
	s, err := wire.SignRevocation(ca.Key, ca.Cluster.ID(), body)
	if err != nil {
		return crypto.Signed{}, nil, err
	}
	if err := writeNew(revPath, pem.EncodeToMemory(&pem.Block{Type: revocationPEMType, Bytes: mustMarshalSigned(s)}), 0o644); err != nil {
		return crypto.Signed{}, nil, err
	}
	return s, body, nil
}

// Enrollment returns the recorded admission certificate of the client
// enrolled as name.
func (ca *ClientCA) Enrollment(name string) (*wire.AdmissionBody, error) {
	if err := CheckClientName(name); err != nil {
		return nil, err
	}
	return ca.enrolled(name)
}

func (ca *ClientCA) enrolled(name string) (*wire.AdmissionBody, error) {
	b, _, err := ca.enrolledSigned(name)
	return b, err
}

// enrolledSigned is enrolled with the recorded certificate itself.
func (ca *ClientCA) enrolledSigned(name string) (*wire.AdmissionBody, crypto.Signed, error) {
	path := filepath.Join(ca.dir, ClientsDirName, name+".cert")
	data, err := readLimited(path, maxKeyFileSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, crypto.Signed{}, fmt.Errorf("certs: no client named %q is enrolled in %s (see \"bqserver client list\")", name, ca.dir)
	}
	if err != nil {
		return nil, crypto.Signed{}, fmt.Errorf("certs: %w", err)
	}
	s, err := ParseAdmission(data)
	if err != nil {
		return nil, crypto.Signed{}, fmt.Errorf("certs: %s: %v", path, err)
	}
	b, err := wire.VerifyAdmissionAny(ca.ever, ca.Cluster.ID(), s)
	if err != nil {
		return nil, crypto.Signed{}, fmt.Errorf("certs: %s: %v", path, err)
	}
	return b, s, nil
}

// NotRenewed lists the enrolled clients, neither revoked nor expired at
// now, whose recorded certificate an older client CA than the newest in
// force signed: a retirement of the older CAs would lock them out.
func (ca *ClientCA) NotRenewed(now time.Time) ([]string, error) {
	ens, err := ca.Enrollments()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, en := range ens {
		if en.Revoked != nil || en.Admission.ValidAt(now) != nil {
			continue
		}
		if en.Issuer != IssuerNewest {
			out = append(out, en.Name)
		}
	}
	return out, nil
}

// Enrollment is one client of the operator's record.
type Enrollment struct {
	Name      string
	Admission *wire.AdmissionBody
	Revoked   *wire.RevocationBody // nil unless revoked
	// Issuer is which client CA signed the recorded certificate:
	// IssuerNewest, IssuerOlder (in force until retire-clients) or
	// IssuerRetired (the servers refuse it).
	Issuer string
}

// The client CAs an Enrollment's certificate may be of.
const (
	IssuerNewest  = "newest"
	IssuerOlder   = "older"
	IssuerRetired = "retired"
)

// issuer says which of the cluster's client CAs signed s.
func (ca *ClientCA) issuer(s crypto.Signed) string {
	if _, err := wire.VerifyAdmission(ca.Key.Public, ca.Cluster.ID(), s); err == nil {
		return IssuerNewest
	}
	for _, k := range ca.inForce {
		if _, err := wire.VerifyAdmission(k, ca.Cluster.ID(), s); err == nil {
			return IssuerOlder
		}
	}
	return IssuerRetired
}

// Enrollments lists the clients enrolled in the cluster, by name.
func (ca *ClientCA) Enrollments() ([]Enrollment, error) {
	dir := filepath.Join(ca.dir, ClientsDirName)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	var out []Enrollment
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".cert")
		if !ok || CheckClientName(name) != nil {
			continue
		}
		b, signed, err := ca.enrolledSigned(name)
		if err != nil {
			return nil, err
		}
		en := Enrollment{Name: name, Admission: b, Issuer: ca.issuer(signed)}
		if _, r, err := ca.revoked(name); err == nil {
			en.Revoked = r
		}
		out = append(out, en)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (ca *ClientCA) revoked(name string) (crypto.Signed, *wire.RevocationBody, error) {
	data, err := readLimited(filepath.Join(ca.dir, ClientsDirName, name+".revoked"), maxKeyFileSize)
	if err != nil {
		return crypto.Signed{}, nil, err
	}
	s, err := decodePEMSigned(data, revocationPEMType)
	if err != nil {
		return crypto.Signed{}, nil, err
	}
	r, err := wire.VerifyRevocationAny(ca.ever, ca.Cluster.ID(), s)
	return s, r, err
}

// Revocations returns every recorded revocation, signed.
func (ca *ClientCA) Revocations() ([]crypto.Signed, error) {
	ens, err := ca.Enrollments()
	if err != nil {
		return nil, err
	}
	var out []crypto.Signed
	for _, en := range ens {
		if en.Revoked != nil {
			s, _, err := ca.revoked(en.Name)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// EncodeAdmission renders an admission certificate as PEM.
func EncodeAdmission(s crypto.Signed) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: admissionPEMType, Bytes: mustMarshalSigned(s)})
}

// ParseAdmission reads one PEM admission certificate.
func ParseAdmission(data []byte) (crypto.Signed, error) {
	return decodePEMSigned(data, admissionPEMType)
}

func mustMarshalSigned(s crypto.Signed) []byte {
	b, err := crypto.Marshal(s)
	if err != nil {
		panic(err) // two byte strings always encode
	}
	return b
}

func decodePEMSigned(data []byte, typ string) (crypto.Signed, error) {
	b, rest := pem.Decode(data)
	if b == nil || b.Type != typ {
		return crypto.Signed{}, fmt.Errorf("want one PEM %q block", typ)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return crypto.Signed{}, fmt.Errorf("unexpected data after the PEM %q block", typ)
	}
	var s crypto.Signed
	if err := crypto.UnmarshalCanonical(b.Bytes, &s); err != nil {
		return crypto.Signed{}, fmt.Errorf("PEM %q block: %v", typ, err)
	}
	return s, nil
}

// writeNew writes a new file (never overwriting: an existing one is an
// fs.ErrExist) and syncs it; on failure it leaves nothing behind.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("certs: creating %s: %w", path, err)
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("certs: writing %s: %w", path, err)
	}
	return nil
}
