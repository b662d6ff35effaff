package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// helloExporterLabel is the TLS exporter label whose value a client signs in
// its Hello, binding the signature to this one TLS connection (RFC 8446 §7.5).
const helloExporterLabel = "bq hello"

// exporterSize is the length of the exporter value signed in a Hello.
const exporterSize = 32

// verifyPeerCert checks a presented chain under the cluster CA for the given
// use and maps its leaf to a server with IdentifyServer (an exact match with
// the cluster file). Host names play no part: the cluster file is the
// authority on which certificate belongs to which server.
func (n *node) verifyPeerCert(certs []*x509.Certificate, usage x509.ExtKeyUsage) (wire.ServerID, error) {
	if len(certs) == 0 {
		return 0, errors.New("no certificate presented")
	}
	leaf := certs[0]
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: n.caPool.Load(), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}
	if _, err := leaf.Verify(opts); err != nil {
		return 0, fmt.Errorf("certificate %q is not issued by the cluster CA: %w", leaf.Subject.CommonName, err)
	}
	id, ok := n.identify(leaf)
	if !ok {
		return 0, fmt.Errorf("certificate %q is not the certificate of any server in the cluster file", leaf.Subject.CommonName)
	}
	return id, nil
}

// listenTLS is the TLS configuration of a server's listener. Clients
// present no certificate (they prove their key with a signed Hello); servers
// present theirs, which is then verified exactly like
// tls.VerifyClientCertIfGiven would, plus the cluster-file match — but here,
// so that a refused peer is logged with its address and the reason.
func (n *node) listenTLS() *tls.Config {
	base := &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{n.cert},
		ClientAuth:             tls.RequestClientCert,
		NextProtos:             []string{n.version.ALPN()},
		SessionTicketsDisabled: true, // every connection shows its certificate again
	}
	base.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		var remote net.Addr
		if hi.Conn != nil {
			remote = hi.Conn.RemoteAddr()
		}
		if !slices.Contains(hi.SupportedProtos, n.version.ALPN()) {
			// A peer of another major version: TLS refuses it (no
			// application protocol in common) before any protocol message,
			// so nothing of it ever reaches the core — no suspicion, no
			// verdict. It is an upgrade in progress, not an attack.
			n.log.Info("transport: refused a connection of another protocol version",
				"addr", remote, "offers", hi.SupportedProtos, "speaks", n.version.ALPN())
		}
		c := base.Clone()
		c.GetConfigForClient = nil
		c.VerifyConnection = func(cs tls.ConnectionState) error { return n.verifyInbound(cs, remote) }
		return c, nil
	}
	return base
}

// verifyInbound vets the certificate, if any, that a connecting peer presents.
func (n *node) verifyInbound(cs tls.ConnectionState, remote net.Addr) error {
	if len(cs.PeerCertificates) == 0 {
		return nil // a client, or a server that will fail its Hello
	}
	id, err := n.verifyPeerCert(cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
	if err == nil && id == n.self {
		err = fmt.Errorf("peer presented our own certificate (%s)", id)
	}
	if err == nil && n.peers()[id] == nil {
		err = fmt.Errorf("%s is not a peer of this server (now)", id)
	}
	if err != nil {
		n.peerWarn("transport: refused a server connection", "addr", remote, "reason", err)
		return fmt.Errorf("transport: %w", err)
	}
	return nil
}

// dialTLS is the TLS configuration for dialing server want.
func (n *node) dialTLS(want wire.ServerID, addr string) *tls.Config {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	c := &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{n.version.ALPN()},
		ServerName: host, // SNI only; identity is checked below
		// InsecureSkipVerify only turns off the host-name check and the
		// default chain check; VerifyConnection does both of ours instead:
		// the cluster CA and the exact certificate of server want.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := n.verifyPeerCert(cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return fmt.Errorf("transport: %s at %s: %w", want, addr, err)
			}
			if id != want {
				return fmt.Errorf("transport: dialed %s at %s but it presented the certificate of %s", want, addr, id)
			}
			return nil
		},
	}
	if n.server {
		c.Certificates = []tls.Certificate{n.cert}
	}
	return c
}

// signHello makes the Hello of key for cluster over a server's nonce and
// this connection's exporter value.
func signHello(key *crypto.PrivateKey, cluster wire.ClusterID, nonce, exporter []byte, observe bool) (*wire.Hello, error) {
	body, err := crypto.Marshal(wire.HelloBody{Nonce: nonce, Exporter: exporter, Cluster: cluster, Observe: observe})
	if err != nil {
		return nil, err
	}
	return &wire.Hello{Key: key.Public.Wire, Sig: key.Sign(crypto.DomainHello, body), Cluster: cluster, Version: wire.Current, Observe: observe}, nil
}

// verifyHello checks that h is for cluster and signed by its key over nonce,
// exporter and its Observe flag, and returns the ClientID of its key (the
// id the connection is bound to, or, for an observer, the one it observes as).
func verifyHello(h *wire.Hello, cluster wire.ClusterID, nonce, exporter []byte) (wire.ClientID, error) {
	if h.Cluster != cluster {
		return wire.ClientID{}, fmt.Errorf("hello of %s is for cluster %s, this server is of cluster %s (a client of another cluster file)",
			wire.ClientIDOf(h.Key), h.Cluster, cluster)
	}
	pub, err := h.Key.Parse()
	if err != nil {
		return wire.ClientID{}, fmt.Errorf("hello key: %w", err)
	}
	body, err := crypto.Marshal(wire.HelloBody{Nonce: nonce, Exporter: exporter, Cluster: cluster, Observe: h.Observe})
	if err != nil {
		return wire.ClientID{}, err
	}
	if !pub.Verify(crypto.DomainHello, body, h.Sig) {
		return wire.ClientID{}, errors.New("hello signature does not verify over this connection's nonce and TLS exporter")
	}
	return wire.ClientID(pub.ID), nil
}
