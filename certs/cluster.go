package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"go.yaml.in/yaml/v3"
)

// ClusterFileName is the name of the public cluster file inside a cluster directory.
const ClusterFileName = "cluster.yaml"

// MaxServers bounds n (ServerID is a uint16; a real cluster is far smaller).
const MaxServers = 1024

// maxClusterFileSize bounds what LoadCluster reads.
const maxClusterFileSize = 16 << 20

// Cluster is the validated content of a cluster file (docs/protocol.md §1): who the
// servers are, how to reach them, and the keys that identify them.
// INVARIANT (after LoadCluster or Init): N = len(Servers), Servers[i].ID = i,
// N ≥ 3F+1, Quorum = QuorumSize(N, F), every signing key is of Scheme, and
// every certificate is issued by CA to ServerCommonName(id).
type Cluster struct {
	Name         string
	N, F, Quorum int // Quorum = ceil((n+f+1)/2)
	Scheme       string
	CA           *x509.Certificate
	Servers      []Server // index == id
	// ClientCA is the key of the client CA of a closed cluster, which signs
	// admission certificates and revocations (docs/protocol.md change 23);
	// nil for an open cluster, which admits any client key.
	ClientCA *crypto.Parsed
	// Approver is the operator's approval key of an open cluster
	// (docs/protocol.md change 65): its members endorse a change only with
	// its approval, or that of the key a later epoch names in its place
	// (ApproversIn). Nil on a closed cluster, whose client CA approves, and
	// in a cluster file made before change 65, whose members endorse what
	// the cluster CA signed.
	Approver *crypto.Parsed
}

// Closed reports whether the cluster admits only enrolled clients.
func (c *Cluster) Closed() bool { return c.ClientCA != nil }

// Server is one entry of the cluster file.
type Server struct {
	ID         wire.ServerID
	Address    string         // host:port (UDP, QUIC)
	SigningKey *crypto.Parsed // protocol signing key (bq/crypto)
	Cert       *x509.Certificate
	// Endorse are its endorsement keys (docs/protocol.md change 64); nil in
	// a cluster file made before them.
	Endorse *wire.EndorseKeys
}

// QuorumSize is q = ⌈(n+f+1)/2⌉: the smallest q for which any two q-subsets
// of n servers meet in at least f+1 servers (docs/protocol.md notation). For
// n ≥ 3f+1 it is at most n−f, so the correct servers alone form a quorum.
func QuorumSize(n, f int) int { return (n + f + 2) / 2 }

// MaxFaults is the largest f that n servers tolerate: ⌊(n−1)/3⌋.
func MaxFaults(n int) int {
	if n < 1 {
		return 0
	}
	return (n - 1) / 3
}

// Keyring returns the servers' signing keys indexed by id, with the
// cluster's id (wire.ClusterIDOf over n, f and those keys).
func (c *Cluster) Keyring() wire.Keyring {
	k := make([]*crypto.Parsed, len(c.Servers))
	var endorse []*wire.EndorseKeys
	for i := range c.Servers {
		k[i] = c.Servers[i].SigningKey
		if e := c.Servers[i].Endorse; e != nil {
			if endorse == nil {
				endorse = make([]*wire.EndorseKeys, len(c.Servers))
			}
			endorse[i] = e
		}
	}
	ring := wire.NewKeyring(c.F, k)
	ring.Endorse = endorse
	return ring
}

// ID is the cluster's id: what every signature in it is bound to.
func (c *Cluster) ID() wire.ClusterID { return c.Keyring().Cluster }

// CAPool returns a new pool holding only the cluster CA.
func (c *Cluster) CAPool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.CA)
	return p
}

// ServerByCert returns the id of the server whose certificate in the cluster
// file is exactly cert (byte for byte). Any other certificate, even one the
// cluster CA issued, is not a server of this cluster.
func (c *Cluster) ServerByCert(cert *x509.Certificate) (wire.ServerID, bool) {
	if cert == nil {
		return 0, false
	}
	for i := range c.Servers {
		if c.Servers[i].Cert != nil && bytes.Equal(c.Servers[i].Cert.Raw, cert.Raw) {
			return c.Servers[i].ID, true
		}
	}
	return 0, false
}

// Addresses maps every server id to its address.
func (c *Cluster) Addresses() map[wire.ServerID]string {
	m := make(map[wire.ServerID]string, len(c.Servers))
	for _, s := range c.Servers {
		m[s.ID] = s.Address
	}
	return m
}

// clusterFile is the YAML form of a cluster file. Pointers tell a missing
// field from a zero one.
type clusterFile struct {
	Name   string `yaml:"name"`
	N      *int   `yaml:"n"`
	F      *int   `yaml:"f"`
	Quorum *int   `yaml:"quorum"`
	Scheme string `yaml:"scheme"`
	CA     string `yaml:"ca"`
	// ClientCA makes the cluster closed (change 23).
	ClientCA string `yaml:"client_ca"`
	// Approver is an open cluster's operator approval key (change 65).
	Approver string        `yaml:"approver"`
	Servers  []serverEntry `yaml:"servers"`
}

type serverEntry struct {
	ID          *int   `yaml:"id"`
	Address     string `yaml:"address"`
	SigningKey  string `yaml:"signing_key"`
	Certificate string `yaml:"certificate"`
	// EndorseKeys: "first=F count=C root=HEX" (change 64).
	EndorseKeys string `yaml:"endorse_keys"`
}

const clusterFileHeader = `# bq cluster file. Public: give the same copy to every server and client.
# Generated by "bqserver init"; a hand edit is checked in full when it is loaded.
`

// marshal renders the cluster in cluster-file form. It writes the YAML by
// hand (scalars through the YAML encoder) so that the file reads well: the
// encoder would quote the key "n" (a YAML 1.1 boolean).
func (c *Cluster) marshal() ([]byte, error) {
	var b strings.Builder
	b.WriteString(clusterFileHeader)
	scalar := func(s string) string {
		out, err := yaml.Marshal(s)
		if err != nil {
			panic(err) // a string always encodes
		}
		return strings.TrimSuffix(string(out), "\n")
	}
	block := func(indent, pemText string) string {
		var lb strings.Builder
		lb.WriteString("|\n")
		for _, line := range strings.Split(strings.TrimRight(pemText, "\n"), "\n") {
			lb.WriteString(indent + line + "\n")
		}
		return lb.String()
	}
	fmt.Fprintf(&b, "name: %s\n", scalar(c.Name))
	fmt.Fprintf(&b, "n: %d\n", c.N)
	fmt.Fprintf(&b, "f: %d\n", c.F)
	fmt.Fprintf(&b, "quorum: %d\n", c.Quorum)
	fmt.Fprintf(&b, "scheme: %s\n", scalar(c.Scheme))
	fmt.Fprintf(&b, "ca: %s", block("  ", certPEM(c.CA.Raw)))
	if c.ClientCA != nil {
		b.WriteString("# Closed: a client is served only with an admission certificate of this client CA (bqserver client add).\n")
		fmt.Fprintf(&b, "client_ca: %s\n", scalar(c.ClientCA.Wire.String()))
	}
	if c.Approver != nil {
		b.WriteString("# The operator's approval key (its private half: ca/operator.key): the servers take a change of the members only with its approval.\n")
		fmt.Fprintf(&b, "approver: %s\n", scalar(c.Approver.Wire.String()))
	}
	b.WriteString("servers:\n")
	for i := range c.Servers {
		s := &c.Servers[i]
		fmt.Fprintf(&b, "  - id: %d\n", s.ID)
		fmt.Fprintf(&b, "    address: %s\n", scalar(s.Address))
		fmt.Fprintf(&b, "    signing_key: %s\n", scalar(s.SigningKey.Wire.String()))
		if s.Endorse != nil {
			fmt.Fprintf(&b, "    endorse_keys: %s\n", scalar(formatEndorseKeys(s.Endorse)))
		}
		fmt.Fprintf(&b, "    certificate: %s", block("      ", certPEM(s.Cert.Raw)))
	}
	return []byte(b.String()), nil
}

func certPEM(der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// LoadCluster reads and validates a cluster file. It reports every problem it
// finds, one error each (joined with errors.Join), each naming the file, the
// field and what to do about it.
func LoadCluster(path string) (*Cluster, error) { return loadCluster(path, time.Now()) }

// InspectCluster reads and validates a cluster file as LoadCluster does,
// except that the cluster CA may be outside its validity window: for
// showing an operator what expired (bqserver server list, status), never
// for connecting, where TLS checks the dates again.
func InspectCluster(path string) (*Cluster, error) { return loadCluster(path, time.Time{}) }

// loadCluster checks the dates of the cluster CA in force at now — the
// cluster file's, or the last one a rotation in the epochs beside the file
// named — and the zero time checks none (InspectCluster). The dates of the
// file's server certificates are not the file's: those servers may all
// have been replaced, with new certificates, by epochs since (a cluster
// outlives its first certificates, issue 28). An expired member is a fault
// of that member: TLS refuses it, the others serve, server list and status
// show it, and the member itself does not start (LoadServer).
func loadCluster(path string, now time.Time) (*Cluster, error) {
	data, err := readLimited(path, maxClusterFileSize)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("certs: cluster file %s does not exist: \"bqserver init\" makes one; bqserver takes the directory that holds it (--dir), bqclient the file itself (--cluster or BQ_CLUSTER)", path)
		}
		return nil, fmt.Errorf("certs: reading cluster file: %w", err)
	}
	c, err := parseCluster(data, path, time.Time{})
	if err != nil || now.IsZero() {
		return c, err
	}
	chain, _, err := c.ChainIn(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	ca, since := c.CAInForce(chain)
	which := "the cluster CA certificate"
	if since > 0 {
		which = fmt.Sprintf("the cluster CA certificate in force (named by epoch %d)", since)
	}
	switch {
	case now.After(ca.NotAfter):
		return nil, fmt.Errorf("certs: %s: ca: %s expired on %s; make a new cluster with \"bqserver init\"", path, which, ca.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(ca.NotBefore):
		return nil, fmt.Errorf("certs: %s: ca: %s is not valid before %s; check this machine's clock", path, which, ca.NotBefore.UTC().Format(time.RFC3339))
	}
	return c, nil
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a bq file may have", path, st.Size(), limit)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, err
	}
	if int64(buf.Len()) > limit {
		return nil, fmt.Errorf("%s is more than the %d bytes a bq file may have", path, limit)
	}
	return buf.Bytes(), nil
}

// problems collects one error per problem found in a file.
type problems struct {
	file string
	errs []error
}

func (p *problems) add(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("certs: %s: %s", p.file, fmt.Sprintf(format, args...)))
}

func (p *problems) err() error { return errors.Join(p.errs...) }

// parseCluster decodes and validates the bytes of a cluster file.
func parseCluster(data []byte, path string, now time.Time) (*Cluster, error) {
	var cf clusterFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cf); errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("certs: %s: the cluster file is empty; make one with \"bqserver init\"", path)
	} else if err != nil {
		return nil, fmt.Errorf("certs: %s: not a valid cluster file: %w", path, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("certs: %s: holds more than one YAML document; a cluster file is one document", path)
	}

	p := &problems{file: path}
	c := &Cluster{Name: cf.Name, Scheme: cf.Scheme}
	var caPool *x509.CertPool

	if strings.TrimSpace(cf.Name) == "" {
		p.add("name: missing; give the cluster a name")
	}
	nOK, fOK := false, false
	switch {
	case cf.N == nil:
		p.add("n: missing; set it to the number of servers")
	case *cf.N < 1 || *cf.N > MaxServers:
		p.add("n: %d is not a number of servers (1..%d)", *cf.N, MaxServers)
	default:
		c.N, nOK = *cf.N, true
	}
	switch {
	case cf.F == nil:
		p.add("f: missing; set it to the number of Byzantine servers tolerated")
	case *cf.F < 0:
		p.add("f: %d is negative", *cf.F)
	default:
		c.F, fOK = *cf.F, true
	}
	if nOK && fOK {
		c.Quorum = QuorumSize(c.N, c.F)
		if c.N < 3*c.F+1 {
			p.add("n=%d servers cannot tolerate f=%d Byzantine servers: need n ≥ 3f+1 = %d; lower f to at most %d or add servers",
				c.N, c.F, 3*c.F+1, MaxFaults(c.N))
		}
		switch {
		case cf.Quorum == nil:
			p.add("quorum: missing; for n=%d, f=%d it is %d", c.N, c.F, c.Quorum)
		case *cf.Quorum != c.Quorum:
			p.add("quorum: %d is wrong: for n=%d, f=%d the quorum is ⌈(n+f+1)/2⌉ = %d; set quorum: %d",
				*cf.Quorum, c.N, c.F, c.Quorum, c.Quorum)
		}
	}
	schemeOK := true
	if cf.Scheme == "" {
		p.add("scheme: missing; set the signature scheme (one of %s)", strings.Join(crypto.Schemes(), ", "))
		schemeOK = false
	} else if err := crypto.CheckScheme(cf.Scheme); err != nil {
		p.add("scheme: %v", err)
		schemeOK = false
	}

	// The cluster CA.
	if cf.CA == "" {
		p.add("ca: missing; it must hold the cluster CA certificate (PEM)")
	} else if ca, err := parseCertPEM(cf.CA); err != nil {
		p.add("ca: %v", err)
	} else {
		switch {
		case !ca.BasicConstraintsValid || !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0:
			p.add("ca: the certificate %q is not a CA certificate", ca.Subject.CommonName)
		case !now.IsZero() && now.After(ca.NotAfter):
			p.add("ca: the cluster CA certificate expired on %s; make a new cluster with \"bqserver init\"", ca.NotAfter.UTC().Format(time.RFC3339))
		case !now.IsZero() && now.Before(ca.NotBefore):
			p.add("ca: the cluster CA certificate is not valid before %s; check this machine's clock", ca.NotBefore.UTC().Format(time.RFC3339))
		default:
			c.CA = ca
			caPool = c.CAPool()
		}
	}

	// The client CA (change 23): its presence closes the cluster.
	if cf.ClientCA != "" {
		if k, err := crypto.ParsePublicKeyString(cf.ClientCA); err != nil {
			p.add("client_ca: %v", err)
		} else {
			c.ClientCA = k
		}
	}

	// The operator's approval key of an open cluster (change 65).
	if cf.Approver != "" {
		switch k, err := crypto.ParsePublicKeyString(cf.Approver); {
		case err != nil:
			p.add("approver: %v", err)
		case cf.ClientCA != "":
			p.add("approver: a closed cluster's changes are approved with its client CA's key (client_ca); an approver is for an open cluster only: remove one of the two")
		default:
			c.Approver = k
		}
	}

	// Servers.
	if len(cf.Servers) == 0 {
		p.add("servers: no server entries")
	}
	countOK := nOK && len(cf.Servers) == c.N
	if nOK && len(cf.Servers) != c.N && len(cf.Servers) > 0 {
		p.add("n is %d but there are %d server entries; make them agree", c.N, len(cf.Servers))
	}
	byID := make(map[int]string)           // id → entry
	byAddr := make(map[string]string)      // normalised address → entry
	bySigning := make(map[[32]byte]string) // signing key fingerprint → entry
	byTLSKey := make(map[string]string)    // TLS public key → entry
	servers := make([]Server, len(cf.Servers))
	for i, e := range cf.Servers {
		where := fmt.Sprintf("servers[%d]", i)
		id := -1         // the entry's id
		idValid := false // id is in range and not a duplicate
		if e.ID == nil {
			p.add("%s: id missing; server ids are 0..n-1", where)
		} else {
			id = *e.ID
			where = fmt.Sprintf("servers[%d] (id %d)", i, id)
			switch {
			case id < 0 || (countOK && id >= c.N):
				p.add("%s: id %d is out of range: ids must be 0..%d, one per server", where, id, len(cf.Servers)-1)
			case byID[id] != "":
				p.add("%s: id %d is also the id of %s; every server needs its own id", where, id, byID[id])
			default:
				byID[id] = where
				idValid = true
			}
		}
		s := Server{ID: wire.ServerID(max(id, 0))}

		// Address.
		if e.Address == "" {
			p.add("%s: address missing; give host:port", where)
		} else if norm, err := checkAddress(e.Address); err != nil {
			p.add("%s: address %q: %v", where, e.Address, err)
		} else {
			if other, dup := byAddr[norm]; dup {
				p.add("%s: address %s is also the address of %s; every server needs its own host:port", where, e.Address, other)
			} else {
				byAddr[norm] = where
			}
			s.Address = e.Address
		}

		// Signing key.
		if e.SigningKey != "" && cf.ClientCA != "" && e.SigningKey == cf.ClientCA {
			p.add("%s: signing_key is the client CA's key; the client CA needs a key of its own", where)
		}
		if e.SigningKey != "" && cf.Approver != "" && e.SigningKey == cf.Approver {
			p.add("%s: signing_key is the approver's key; the operator's approval key must be apart from every server's", where)
		}
		if e.SigningKey == "" {
			p.add("%s: signing_key missing", where)
		} else if k, err := crypto.ParsePublicKeyString(e.SigningKey); err != nil {
			p.add("%s: signing_key: %v", where, err)
		} else if schemeOK && k.Wire.Scheme != cf.Scheme {
			p.add("%s: signing_key is a %s key but the cluster's scheme is %s; every server must use the cluster's scheme",
				where, k.Wire.Scheme, cf.Scheme)
		} else if other, dup := bySigning[k.ID]; dup {
			p.add("%s: signing_key is also the signing key of %s; every server needs its own signing key", where, other)
		} else {
			bySigning[k.ID] = where
			s.SigningKey = k
		}

		// Endorsement keys (change 64): optional, for a cluster file made
		// before them.
		if e.EndorseKeys != "" {
			if k, err := parseEndorseKeys(e.EndorseKeys); err != nil {
				p.add("%s: endorse_keys: %v", where, err)
			} else if k.First != 1 {
				p.add("%s: endorse_keys: the first members' keys start at epoch 1, not %d", where, k.First)
			} else {
				s.Endorse = k
			}
		}

		// TLS certificate.
		if e.Certificate == "" {
			p.add("%s: certificate missing", where)
		} else if cert, err := parseCertPEM(e.Certificate); err != nil {
			p.add("%s: certificate: %v", where, err)
		} else {
			certID := -1 // a bad id is reported once, not again as a certificate name mismatch
			if idValid {
				certID = id
			}
			if err := checkServerCert(cert, certID, c.CA, caPool, now); err != nil {
				p.add("%s: certificate: %v", where, err)
			}
			if s.Address != "" {
				host, _, _ := net.SplitHostPort(s.Address)
				if err := cert.VerifyHostname(host); err != nil {
					p.add("%s: certificate is for %s, which does not include the address host %s; issue a certificate for that host or fix the address",
						where, certHosts(cert), host)
				}
			}
			pk, err := x509.MarshalPKIXPublicKey(cert.PublicKey)
			if err == nil {
				if other, dup := byTLSKey[string(pk)]; dup {
					p.add("%s: certificate has the same TLS key as the certificate of %s; every server needs its own TLS key", where, other)
				} else {
					byTLSKey[string(pk)] = where
				}
			}
			s.Cert = cert
		}
		servers[i] = s
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	if !countOK || c.CA == nil {
		// Unreachable: every way to get here adds a problem above.
		return nil, fmt.Errorf("certs: %s: invalid cluster file", path)
	}
	c.Servers = make([]Server, c.N)
	for _, s := range servers {
		c.Servers[s.ID] = s
	}
	return c, nil
}

// checkAddress checks that a is host:port with a dialable host and a port in
// 1..65535, and returns a normalised form for duplicate detection.
func checkAddress(a string) (string, error) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return "", fmt.Errorf("must be host:port (IPv6 hosts in brackets, e.g. [::1]:7400): %v", err)
	}
	if host == "" {
		return "", errors.New("has no host: write host:port")
	}
	if err := checkHost(host); err != nil {
		return "", err
	}
	pn, err := strconv.Atoi(port)
	if err != nil || pn < 1 || pn > 65535 {
		return "", fmt.Errorf("port %q is not a port number (1..65535)", port)
	}
	h := strings.ToLower(host)
	if ip := net.ParseIP(host); ip != nil {
		h = ip.String()
	}
	return net.JoinHostPort(h, strconv.Itoa(pn)), nil
}

// checkHost refuses hosts others cannot dial.
func checkHost(host string) error {
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsUnspecified() {
			return fmt.Errorf("host %s is a wildcard address, not one other servers and clients can dial", host)
		}
		return nil
	}
	if strings.ContainsAny(host, " \t\r\n/,") {
		return fmt.Errorf("host %q is not an IP address or DNS name", host)
	}
	return nil
}

func certHosts(cert *x509.Certificate) string {
	var hs []string
	for _, ip := range cert.IPAddresses {
		hs = append(hs, ip.String())
	}
	hs = append(hs, cert.DNSNames...)
	if len(hs) == 0 {
		return "no host"
	}
	return strings.Join(hs, ", ")
}

// checkServerCert checks a server certificate against the cluster CA: issued
// by it, valid now, named ServerCommonName(id), usable for mutual TLS.
// ca is nil when the CA itself is invalid (already reported); then only the
// checks that do not need it run.
func checkServerCert(cert *x509.Certificate, id int, ca *x509.Certificate, pool *x509.CertPool, now time.Time) error {
	var errs []string
	if id >= 0 && cert.Subject.CommonName != ServerCommonName(id) {
		errs = append(errs, fmt.Sprintf("its common name is %q, not %q: this is another server's certificate; use the certificate made for server %d",
			cert.Subject.CommonName, ServerCommonName(id), id))
	}
	if ca != nil {
		if err := cert.CheckSignatureFrom(ca); err != nil {
			errs = append(errs, "not issued by the cluster CA (in ca:): it comes from another cluster; use the certificate made with this cluster's CA")
		} else if !now.IsZero() && now.After(cert.NotAfter) {
			errs = append(errs, fmt.Sprintf("expired on %s: issue a new certificate with the cluster CA", cert.NotAfter.UTC().Format(time.RFC3339)))
		} else if !now.IsZero() && now.Before(cert.NotBefore) {
			errs = append(errs, fmt.Sprintf("not valid before %s: check this machine's clock", cert.NotBefore.UTC().Format(time.RFC3339)))
		} else {
			for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
				if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: validAt(now, cert, ca), KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
					errs = append(errs, fmt.Sprintf("not usable for mutual TLS: %v", err))
					break
				}
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, "; "))
}

// parseCertPEM parses exactly one PEM CERTIFICATE block and nothing else.
func parseCertPEM(s string) (*x509.Certificate, error) {
	der, err := decodeOnePEM([]byte(s), "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("malformed certificate: %v", err)
	}
	return cert, nil
}

// decodeOnePEM returns the body of the single PEM block of type typ in data.
func decodeOnePEM(data []byte, typ string) ([]byte, error) {
	b, rest := pem.Decode(data)
	if b == nil {
		return nil, fmt.Errorf("no PEM %q block found", typ)
	}
	if b.Type != typ {
		return nil, fmt.Errorf("PEM block is %q, want %q", b.Type, typ)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("unexpected data after the PEM %q block", typ)
	}
	if typ != signingKeyPEMType && len(b.Headers) != 0 {
		return nil, fmt.Errorf("PEM %q block has unexpected headers", typ)
	}
	return b.Bytes, nil
}

// validAt is the time a certificate chain is checked at: now, or, when now
// is the zero time (InspectCluster), the first second both cert and its CA
// are valid.
func validAt(now time.Time, cert, ca *x509.Certificate) time.Time {
	if !now.IsZero() {
		return now
	}
	t := cert.NotBefore
	if ca.NotBefore.After(t) {
		t = ca.NotBefore
	}
	return t.Add(time.Second)
}
