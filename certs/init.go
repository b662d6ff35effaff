package certs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// Defaults of InitOptions' zero fields.
const (
	DefaultHost     = "127.0.0.1"
	DefaultPortBase = 7400
	DefaultName     = "bq"
)

// CA files, inside DIR/ca/.
const (
	CADirName = "ca"
	CAKeyFile = "ca.key" // PKCS#8 PEM; only needed to add servers: keep it offline
	// ClientCAKeyFile is the client CA's signing key (PEM "BQ SIGNING KEY"),
	// of a closed cluster: it enrolls and revokes clients (change 23).
	ClientCAKeyFile = "client-ca.key"
	// OperatorKeyFile (operator.go) is an open cluster's operator approval
	// key (change 65).
)

// ErrBadOptions marks Init errors caused by its options (as opposed to the
// file system or the random source).
var ErrBadOptions = errors.New("certs: bad init options")

// InitOptions describe a new cluster. Zero Host, PortBase, Scheme and Name
// take the defaults (127.0.0.1, 7400, Ed25519, "bq"). F is the number of
// Byzantine servers tolerated; 0 means none, and a negative F means the most
// the servers can tolerate, MaxFaults(Servers) = ⌊(Servers−1)/3⌋.
type InitOptions struct {
	Dir     string
	Servers int
	F       int
	// Host is the host every server's address uses, or a comma-separated
	// list of exactly Servers hosts, one per server. Server i listens on
	// port PortBase+i.
	Host     string
	PortBase int
	Scheme   string
	Name     string
	// Closed makes a client CA: the cluster then serves only clients that
	// show an admission certificate of it (docs/protocol.md change 23).
	// `bqserver init` sets it unless --open. An open cluster gets an
	// operator approval key instead (DIR/ca/operator.key, the cluster
	// file's approver), which approves its changes (change 65).
	Closed bool
}

// hostList splits Host at commas.
func (o InitOptions) hostList() []string {
	h := o.Host
	if h == "" {
		h = DefaultHost
	}
	parts := strings.Split(h, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// hosts returns the host of each server. Call it after check.
func (o InitOptions) hosts() []string {
	parts := o.hostList()
	if len(parts) == 1 {
		out := make([]string, o.Servers)
		for i := range out {
			out[i] = parts[0]
		}
		return out
	}
	return parts
}

func (o *InitOptions) defaults() {
	if o.Host == "" {
		o.Host = DefaultHost
	}
	if o.PortBase == 0 {
		o.PortBase = DefaultPortBase
	}
	if o.Scheme == "" {
		o.Scheme = crypto.DefaultScheme
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.F < 0 {
		o.F = MaxFaults(o.Servers)
	}
}

// check reports every problem with the options, one error each, all marked ErrBadOptions.
func (o InitOptions) check() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrBadOptions, fmt.Sprintf(format, args...)))
	}
	if o.Dir == "" {
		bad("no directory given (--dir)")
	}
	nOK := true
	if o.Servers < 1 || o.Servers > MaxServers {
		bad("--servers %d: a cluster has 1..%d servers", o.Servers, MaxServers)
		nOK = false
	}
	if nOK && o.Servers < 3*o.F+1 {
		bad("--servers %d cannot tolerate --f %d Byzantine servers: need at least 3f+1 = %d servers (with %d servers, f is at most %d)",
			o.Servers, o.F, 3*o.F+1, o.Servers, MaxFaults(o.Servers))
	}
	hs := o.hostList()
	if nOK && len(hs) != 1 && len(hs) != o.Servers {
		bad("--host lists %d hosts for %d servers: give one host, or one per server", len(hs), o.Servers)
	}
	for _, h := range hs {
		if h == "" {
			bad("--host %q has an empty host", o.Host)
			break
		}
		if err := checkHost(h); err != nil {
			bad("--host: %v", err)
			break
		}
	}
	if o.PortBase < 1 || o.PortBase > 65535 {
		bad("--port-base %d is not a port (1..65535)", o.PortBase)
	} else if nOK && o.PortBase+o.Servers-1 > 65535 {
		bad("--port-base %d with %d servers needs ports up to %d, beyond 65535: lower --port-base", o.PortBase, o.Servers, o.PortBase+o.Servers-1)
	}
	if err := crypto.CheckScheme(o.Scheme); err != nil {
		bad("--scheme: %v", err)
	}
	if strings.TrimSpace(o.Name) == "" || len(o.Name) > 64 || strings.IndexFunc(o.Name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		bad("--name %q: a cluster name is 1..64 printable characters", o.Name)
	}
	return errors.Join(errs...)
}

// certHostsFor is the host list of a server certificate: the server's host,
// plus localhost and 127.0.0.1 when the host is a loopback one.
func certHostsFor(host string) []string {
	hosts := []string{host}
	loopback := strings.EqualFold(host, "localhost")
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		loopback = true
	}
	if loopback {
		for _, h := range []string{"localhost", "127.0.0.1"} {
			if !strings.EqualFold(h, host) && !(h == "127.0.0.1" && net.ParseIP(host).Equal(net.ParseIP(h))) {
				hosts = append(hosts, h)
			}
		}
	}
	return hosts
}

// Init makes a new cluster in opts.Dir: a cluster CA (DIR/ca/ca.key), the
// client CA of a closed cluster (DIR/ca/client-ca.key) or the operator key
// of an open one (DIR/ca/operator.key, change 65), the public cluster file
// (DIR/cluster.yaml) and each server's private material (DIR/server-<i>/:
// tls.key, tls.crt, signing.key). It never overwrites: if
// any of these exists, it refuses. Private directories are 0700 and private
// files 0600. On failure it removes what it wrote.
func Init(opts InitOptions, now time.Time, rand io.Reader) (*Cluster, error) {
	opts.defaults()
	if err := opts.check(); err != nil {
		return nil, err
	}
	clusterPath := filepath.Join(opts.Dir, ClusterFileName)
	if err := refuseExisting(opts.Dir, opts.Servers); err != nil {
		return nil, err
	}

	// Make everything in memory first.
	ca, err := NewCA(opts.Name, now, rand)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		Name: opts.Name, N: opts.Servers, F: opts.F, Quorum: QuorumSize(opts.Servers, opts.F),
		Scheme: opts.Scheme, CA: ca.Cert, Servers: make([]Server, opts.Servers),
	}
	type private struct{ tlsKey, tlsCert, signingKey, endorseKey, endorseLeaves []byte }
	privs := make([]private, opts.Servers)
	hosts := opts.hosts()
	for i := range c.Servers {
		der, key, err := ca.IssueServer(i, certHostsFor(hosts[i]), now, rand)
		if err != nil {
			return nil, err
		}
		cert, err := parseDER(der)
		if err != nil {
			return nil, err
		}
		sk, err := crypto.GenerateKey(opts.Scheme, rand)
		if err != nil {
			return nil, fmt.Errorf("certs: generating the signing key of server %d: %w", i, err)
		}
		keyPEM, err := encodePKCS8(key)
		if err != nil {
			return nil, err
		}
		en, err := newEndorser(rand, 1)
		if err != nil {
			return nil, err
		}
		ek := en.Keys()
		c.Servers[i] = Server{
			ID:         wire.ServerID(i),
			Address:    net.JoinHostPort(hosts[i], strconv.Itoa(opts.PortBase+i)),
			SigningKey: sk.Public,
			Cert:       cert,
			Endorse:    &ek,
		}
		privs[i] = private{tlsKey: keyPEM, tlsCert: []byte(certPEM(der)), signingKey: encodeSigningKey(sk),
			endorseKey: en.State(), endorseLeaves: en.Leaves()}
	}
	var clientCAKey []byte
	if opts.Closed {
		k, err := crypto.GenerateKey(opts.Scheme, rand)
		if err != nil {
			return nil, fmt.Errorf("certs: generating the client CA key: %w", err)
		}
		c.ClientCA = k.Public
		clientCAKey = encodeSigningKey(k)
	}
	var operatorKey []byte
	if !opts.Closed {
		k, err := crypto.GenerateKey(opts.Scheme, rand)
		if err != nil {
			return nil, fmt.Errorf("certs: generating the operator key: %w", err)
		}
		c.Approver = k.Public
		operatorKey = encodeSigningKey(k)
	}
	caKeyPEM, err := encodePKCS8(ca.Key)
	if err != nil {
		return nil, err
	}
	yamlBytes, err := c.marshal()
	if err != nil {
		return nil, err
	}
	// What we write must load: check it with the loader itself.
	loaded, err := parseCluster(yamlBytes, clusterPath, now)
	if err != nil {
		return nil, fmt.Errorf("certs: internal error: the generated cluster file does not load: %w", err)
	}

	// Write: private material first, the cluster file last, so a failed
	// init never leaves a loadable cluster behind.
	w := &writer{}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("certs: creating %s: %w", opts.Dir, err)
	}
	caDir := filepath.Join(opts.Dir, CADirName)
	w.mkdir(caDir)
	w.file(filepath.Join(caDir, CAKeyFile), caKeyPEM, 0o600)
	if clientCAKey != nil {
		w.file(filepath.Join(caDir, ClientCAKeyFile), clientCAKey, 0o600)
	}
	if operatorKey != nil {
		w.file(filepath.Join(caDir, OperatorKeyFile), operatorKey, 0o600)
	}
	for i, p := range privs {
		sdir := ServerDir(opts.Dir, i)
		w.mkdir(sdir)
		w.file(filepath.Join(sdir, TLSKeyFile), p.tlsKey, 0o600)
		w.file(filepath.Join(sdir, TLSCertFile), p.tlsCert, 0o600)
		w.file(filepath.Join(sdir, SigningKeyFile), p.signingKey, 0o600)
		w.file(filepath.Join(sdir, EndorseKeyFile), p.endorseKey, 0o600)
		w.file(filepath.Join(sdir, EndorseLeavesFile), p.endorseLeaves, 0o644)
	}
	w.file(clusterPath, yamlBytes, 0o644)
	w.syncDir(opts.Dir)
	if w.err != nil {
		w.undo()
		return nil, w.err
	}
	return loaded, nil
}

// refuseExisting refuses to make a cluster where one (or part of one) exists.
func refuseExisting(dir string, n int) error {
	paths := []string{filepath.Join(dir, ClusterFileName), filepath.Join(dir, CADirName)}
	for i := range n {
		paths = append(paths, ServerDir(dir, i))
	}
	for _, p := range paths {
		_, err := os.Lstat(p)
		if err == nil {
			return fmt.Errorf("certs: %s already exists: refusing to overwrite an existing cluster (its keys would be lost); choose another --dir, or remove the old cluster first", p)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("certs: checking %s: %w", p, err)
		}
	}
	return nil
}

// writer creates directories and files, never overwriting, remembering what
// it made so that a failure can be undone. After the first error it does nothing.
type writer struct {
	made []string
	err  error
}

func (w *writer) mkdir(path string) {
	if w.err != nil {
		return
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		w.err = fmt.Errorf("certs: creating %s: %w", path, err)
		return
	}
	w.made = append(w.made, path)
}

func (w *writer) file(path string, data []byte, mode os.FileMode) {
	if w.err != nil {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		w.err = fmt.Errorf("certs: creating %s: %w", path, err)
		return
	}
	w.made = append(w.made, path)
	if _, err := f.Write(data); err != nil {
		f.Close()
		w.err = fmt.Errorf("certs: writing %s: %w", path, err)
		return
	}
	if err := f.Sync(); err != nil {
		f.Close()
		w.err = fmt.Errorf("certs: writing %s: %w", path, err)
		return
	}
	if err := f.Close(); err != nil {
		w.err = fmt.Errorf("certs: writing %s: %w", path, err)
	}
}

func (w *writer) syncDir(path string) {
	if w.err != nil {
		return
	}
	if d, err := os.Open(path); err == nil {
		_ = d.Sync() // best effort: not every file system syncs directories
		d.Close()
	}
}

func (w *writer) undo() {
	for i := len(w.made) - 1; i >= 0; i-- {
		_ = os.Remove(w.made[i])
	}
}
