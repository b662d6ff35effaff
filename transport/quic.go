package transport

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/quic-go/quic-go"
	"golang.org/x/time/rate"
)

// ServerConfig configures ListenServer.
type ServerConfig struct {
	ID wire.ServerID
	// Cluster is this server's cluster: client Hellos must be signed for it,
	// and servers that greet with another are refused (docs/protocol.md §1).
	Cluster    wire.ClusterID
	ListenAddr string                   // UDP host:port to listen on (and to dial from)
	Peers      map[wire.ServerID]string // every server's address; this server's own entry is ignored
	Cert       tls.Certificate          // this server's certificate, issued by the cluster CA
	CAPool     *x509.CertPool           // the cluster CA
	// IdentifyServer maps a presented certificate to its server: an exact
	// match with the cluster file. It must be safe for concurrent use.
	IdentifyServer func(*x509.Certificate) (wire.ServerID, bool)
	// AdmitClient decides whether a client key may connect (a closed
	// cluster, docs/protocol.md change 23), given the admission
	// certificate its Hello carried (nil if none), and returns what the
	// certificate grants (delivered with EventConnected); nil admits every
	// key. It must be safe for concurrent use.
	AdmitClient func(c wire.ClientID, admission *crypto.Signed) (*wire.AdmissionBody, error)
	// Version is the protocol version this server speaks (zero: wire.Current):
	// its major is the QUIC ALPN, so peers of another major cannot connect.
	Version wire.Version
	Limits  Limits
	Logger  *slog.Logger // nil: slog.Default()
	// OnLimit, if set, is told of every connection refused by a limit, by
	// the limit's settings key (max_client_connections,
	// accept_rate_per_address, accept_rate), for the server's metrics
	// (docs/protocol.md change 25). It must be safe for concurrent use.
	OnLimit func(limit string)
	// Preverify, if set, is asked once per connection (but an observer's)
	// for a check that the connection's read loop then runs on each of its
	// messages before delivering it, so that signature checks run in
	// parallel across connections (wire.Preverifier); a nil check checks
	// nothing. A check must decide nothing; Preverify must be safe for
	// concurrent use, each check need not be.
	Preverify func(from Peer) func(*wire.Message)
}

// ClientConfig configures DialClient.
type ClientConfig struct {
	Key       *crypto.PrivateKey // the client's signing key; its ClientID is the client's identity
	Admission *crypto.Signed     // its admission certificate, for a closed cluster (nil: none)
	// RenewedAdmission, if set, is asked before each connection's Hello: a
	// certificate it returns is shown instead of Admission (an identity
	// file renewed while the client runs, change 52); nil: Admission. It
	// must be safe for concurrent use.
	RenewedAdmission func() *crypto.Signed
	// Observe makes every connection an observer connection (docs/protocol.md
	// change 32): it only reads, and each server binds it to an id of its
	// own (wire.ObserverID), so it never displaces this key's session
	// connection of another process.
	Observe        bool
	Cluster        wire.ClusterID           // the cluster the Hello is signed for; servers of another are refused
	Servers        map[wire.ServerID]string // every server's address
	CAPool         *x509.CertPool           // the cluster CA
	IdentifyServer func(*x509.Certificate) (wire.ServerID, bool)
	Version        wire.Version // zero: wire.Current
	Limits         Limits
	Logger         *slog.Logger // nil: slog.Default()
}

// QUIC application error codes, sent when this side closes a connection.
const (
	codeShutdown  quic.ApplicationErrorCode = 0 // Close, or a connection that ended
	codeReplaced  quic.ApplicationErrorCode = 1 // a newer connection of the same peer took over
	codeBadInput  quic.ApplicationErrorCode = 2 // the peer sent bytes that are not a valid frame or message
	codeRefused   quic.ApplicationErrorCode = 3 // authentication or admission failed
	codeLimit     quic.ApplicationErrorCode = 4 // too many connections
	codeSlow      quic.ApplicationErrorCode = 5 // the peer did not keep up with what we send it
	codeHandshake quic.ApplicationErrorCode = 6 // the set-up exchange failed or timed out
)

// ListenServer starts a server's transport: it listens on cfg.ListenAddr and
// keeps a connection to every other server in cfg.Peers. The transport is
// Reconfigurable: SetServers changes its peers while it runs.
//
// Server to server: each server dials every other one and sends to it only
// on the connection it dialed (one ordered stream), reconnecting with capped,
// jittered exponential backoff. Both sides present certificates (mutual TLS):
// the dialer checks that the acceptor's certificate is the one of the server
// it meant to reach, the acceptor that the dialer's is some other server's.
// EventConnected/EventDisconnected about a server follow the connection this
// server dialed; messages from that server arrive on the one it dialed, so
// they may come before EventConnected.
//
// Clients: a client connection is bound to a ClientID by the Challenge /
// Hello / Welcome exchange (docs/protocol.md §1) before anything else flows;
// EventConnected then EventDisconnected bracket its messages. Send to a
// client without a live connection is ErrNotConnected; a client whose queue
// overflows is disconnected (a slow consumer) and Send says ErrQueueFull.
func ListenServer(cfg ServerConfig) (Transport, error) {
	lim, err := cfg.check()
	if err != nil {
		return nil, err
	}
	udp, err := listenUDP(cfg.ListenAddr)
	if err != nil {
		return nil, err
	}
	n := newNode(lim, cfg.Logger, udp)
	n.server = true
	n.cluster = cfg.Cluster
	n.self = cfg.ID
	n.cert = cfg.Cert
	n.caPool.Store(cfg.CAPool)
	n.identify = cfg.IdentifyServer
	n.admit = cfg.AdmitClient
	n.onLimit = cfg.OnLimit
	n.preverify = cfg.Preverify
	n.version = versionOr(cfg.Version)
	n.log = n.log.With("node", ServerPeer(cfg.ID).String())
	n.mu.Lock()
	n.replaceDialersLocked(cfg.Peers) // started below, once we listen
	n.mu.Unlock()
	n.tr.ConnContext = n.connContext
	resetKey, err := statelessResetKey(cfg.Cert)
	if err != nil {
		n.cancel()
		_ = udp.Close()
		return nil, err
	}
	n.tr.StatelessResetKey = resetKey
	ln, err := n.tr.Listen(n.listenTLS(), n.quicConfig(-1))
	if err != nil {
		n.cancel()
		_ = n.tr.Close()
		_ = udp.Close()
		return nil, fmt.Errorf("transport: listening on %s: %w", cfg.ListenAddr, err)
	}
	n.ln = ln
	n.log.Info("transport: listening", "addr", udp.LocalAddr().String(), "peers", len(n.peers()))
	n.wg.Add(1)
	go n.acceptLoop()
	n.startDialers()
	return n, nil
}

// DialClient starts a client's transport: it keeps a connection to every
// server in cfg.Servers, reconnecting with capped, jittered exponential
// backoff, and binds each to its key with a signed Hello. Messages sent to a
// server while it is unreachable wait in its queue (up to the limits) and go
// out once it is reachable again; EventConnected says it is. The transport
// is Reconfigurable: SetServers changes its servers while it runs.
func DialClient(cfg ClientConfig) (Transport, error) {
	lim, err := cfg.check()
	if err != nil {
		return nil, err
	}
	udp, err := listenUDP(":0")
	if err != nil {
		return nil, err
	}
	n := newNode(lim, cfg.Logger, udp)
	n.key = cfg.Key
	n.admission = cfg.Admission
	n.renewedAdmission = cfg.RenewedAdmission
	n.cluster = cfg.Cluster
	n.clientID = wire.ClientID(cfg.Key.Public.ID)
	n.observe = cfg.Observe
	n.caPool.Store(cfg.CAPool)
	n.identify = cfg.IdentifyServer
	n.version = versionOr(cfg.Version)
	n.log = n.log.With("node", n.clientID.String())
	n.mu.Lock()
	n.replaceDialersLocked(cfg.Servers)
	n.mu.Unlock()
	n.startDialers()
	return n, nil
}

func (cfg *ServerConfig) check() (Limits, error) {
	lim, err := cfg.Limits.withDefaults()
	errs := []error{err}
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("transport: ServerConfig."+format, args...))
	}
	if cfg.ListenAddr == "" {
		bad("ListenAddr: empty")
	}
	for id, addr := range cfg.Peers {
		if addr == "" && id != cfg.ID {
			bad("Peers[%s]: empty address", id)
		}
	}
	if cfg.CAPool == nil {
		bad("CAPool: missing")
	}
	if cfg.IdentifyServer == nil {
		bad("IdentifyServer: missing")
	}
	if len(cfg.Cert.Certificate) == 0 || cfg.Cert.PrivateKey == nil {
		bad("Cert: missing certificate or private key")
	} else {
		if cfg.Cert.Leaf == nil {
			leaf, err := x509.ParseCertificate(cfg.Cert.Certificate[0])
			if err != nil {
				bad("Cert: %v", err)
			}
			cfg.Cert.Leaf = leaf
		}
		if cfg.Cert.Leaf != nil && cfg.IdentifyServer != nil {
			if id, ok := cfg.IdentifyServer(cfg.Cert.Leaf); !ok || id != cfg.ID {
				bad("Cert: the cluster file does not name this certificate as %s's", cfg.ID)
			}
		}
	}
	return lim, errors.Join(errs...)
}

func (cfg *ClientConfig) check() (Limits, error) {
	lim, err := cfg.Limits.withDefaults()
	errs := []error{err}
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("transport: ClientConfig."+format, args...))
	}
	if cfg.Key == nil {
		bad("Key: missing")
	}
	if len(cfg.Servers) == 0 {
		bad("Servers: empty")
	}
	for id, addr := range cfg.Servers {
		if addr == "" {
			bad("Servers[%s]: empty address", id)
		}
	}
	if cfg.CAPool == nil {
		bad("CAPool: missing")
	}
	if cfg.IdentifyServer == nil {
		bad("IdentifyServer: missing")
	}
	return lim, errors.Join(errs...)
}

// statelessResetKey derives the server's QUIC stateless reset key from its
// TLS private key, so it is the same after a restart: a server that crashed
// and came back answers packets of its old connections with a stateless
// reset, and peers reconnect at once instead of after the idle timeout.
// Nobody without the server's private key can derive it (and so forge a
// reset, which could only close a connection anyway).
func statelessResetKey(cert tls.Certificate) (*quic.StatelessResetKey, error) {
	der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("transport: deriving the stateless reset key: %w", err)
	}
	b, err := hkdf.Key(sha256.New, der, nil, "bq/v1/quic-stateless-reset", 32)
	if err != nil {
		return nil, fmt.Errorf("transport: deriving the stateless reset key: %w", err)
	}
	var k quic.StatelessResetKey
	copy(k[:], b)
	return &k, nil
}

func listenUDP(addr string) (*net.UDPConn, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen address %q: %w", addr, err)
	}
	udp, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	return udp, nil
}

// node is one end of the QUIC network: a server or a client.
type node struct {
	log *slog.Logger
	lim Limits

	server           bool
	cluster          wire.ClusterID
	version          wire.Version    // what this node speaks: its major is the ALPN
	self             wire.ServerID   // servers
	cert             tls.Certificate // servers
	admit            func(wire.ClientID, *crypto.Signed) (*wire.AdmissionBody, error)
	key              *crypto.PrivateKey            // clients
	admission        *crypto.Signed                // clients
	renewedAdmission func() *crypto.Signed         // clients: asked at each Hello (nil: none)
	clientID         wire.ClientID                 // clients
	observe          bool                          // clients: observer connections (change 32)
	caPool           atomic.Pointer[x509.CertPool] // the CAs trusted now (SetCAPool)
	identify         func(*x509.Certificate) (wire.ServerID, bool)

	udp *net.UDPConn
	tr  *quic.Transport
	ln  *quic.Listener // servers

	// dialers holds one outbound link per server this node talks to now:
	// an immutable map, read without a lock (peers) and replaced whole,
	// under mu, by SetServers.
	dialers atomic.Pointer[map[wire.ServerID]*dialer]

	inbound   chan Inbound
	ctx       context.Context // cancelled by Close
	cancel    context.CancelFunc
	wg        sync.WaitGroup // every goroutine of ours
	closeOnce sync.Once
	isClosed  atomic.Bool

	mu      sync.Mutex
	closed  bool                         // guarded by mu; set first thing in Close
	conns   map[*quic.Conn]struct{}      // every connection we hold
	srvIn   map[wire.ServerID]*quic.Conn // accepted server connections
	clients map[wire.ClientID][]*clientConn
	// INVARIANT: clients[c] is non-empty, oldest first, at most MaxConnsPerClient long.
	// observers: the observer connections of each client (change 32), oldest first.
	// INVARIANT: observers[p] is non-empty and at most MaxObserversPerClient
	// long, and each of its conns is also clients[its id]'s only conn.
	observers   map[wire.ClientID][]*clientConn
	accepted    int                            // accepted connections not yet closed (ConnContext)
	clientConns int                            // client connections in handshake or bound
	accept      *rate.Limiter                  // new connections started per second (Limits.AcceptRate)
	onLimit     func(string)                   // ServerConfig.OnLimit; nil on clients
	preverify   func(Peer) func(*wire.Message) // ServerConfig.Preverify; nil on clients
	// perAddress: the AcceptRatePerAddress bucket of each source address.
	// INVARIANT: at most maxAddressBuckets entries (allowAddress).
	perAddress   map[netip.Addr]*rate.Limiter
	lastPeerWarn time.Time // see peerWarn

	// tamper, set only by tests, rewrites or drops (nil) frames in Send.
	tamper atomic.Pointer[func(to Peer, frame []byte) []byte]
}

type clientConn struct {
	id wire.ClientID
	// observes is the client whose observer connection this is (nil: a
	// client's own connection).
	observes *wire.ClientID
	conn     *quic.Conn
	q        *sendQueue
	slow     atomic.Bool // its queue overflowed and its connection is being closed
}

func newNode(lim Limits, log *slog.Logger, udp *net.UDPConn) *node {
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{
		log:        log,
		lim:        lim,
		udp:        udp,
		tr:         &quic.Transport{Conn: udp},
		inbound:    make(chan Inbound, lim.InboundLen),
		ctx:        ctx,
		cancel:     cancel,
		conns:      make(map[*quic.Conn]struct{}),
		srvIn:      make(map[wire.ServerID]*quic.Conn),
		clients:    make(map[wire.ClientID][]*clientConn),
		observers:  make(map[wire.ClientID][]*clientConn),
		accept:     acceptLimiter(lim),
		perAddress: make(map[netip.Addr]*rate.Limiter),
	}
	n.dialers.Store(&map[wire.ServerID]*dialer{})
	return n
}

// maxAddressBuckets bounds the source addresses whose handshake rate is
// tracked at once.
const maxAddressBuckets = 4096

// allowAddress takes a token of addr's bucket (Limits.AcceptRatePerAddress).
// When maxAddressBuckets addresses are tracked, those with full buckets are
// dropped; if none is, every bucket is: the global AcceptRate still holds,
// and an attacker with that many addresses cannot lock new ones out.
// n.mu must be held.
func (n *node) allowAddress(addr net.Addr, now time.Time) bool {
	if n.lim.AcceptRatePerAddress < 0 {
		return true
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return true
	}
	ip := ap.Addr().Unmap()
	lim := n.perAddress[ip]
	if lim == nil {
		if len(n.perAddress) >= maxAddressBuckets {
			for a, l := range n.perAddress {
				if l.TokensAt(now) >= float64(l.Burst()) {
					delete(n.perAddress, a)
				}
			}
			if len(n.perAddress) >= maxAddressBuckets {
				clear(n.perAddress)
			}
		}
		lim = rate.NewLimiter(rate.Limit(n.lim.AcceptRatePerAddress), n.lim.AcceptBurstPerAddress)
		n.perAddress[ip] = lim
	}
	return lim.AllowN(now, 1)
}

// acceptLimiter is the token bucket of Limits.AcceptRate and AcceptBurst
// (golang.org/x/time/rate); a negative rate is no limit.
func acceptLimiter(lim Limits) *rate.Limiter {
	if lim.AcceptRate < 0 {
		return rate.NewLimiter(rate.Inf, 0)
	}
	return rate.NewLimiter(rate.Limit(lim.AcceptRate), lim.AcceptBurst)
}

func versionOr(v wire.Version) wire.Version {
	if v == (wire.Version{}) {
		return wire.Current
	}
	return v
}

// quicConfig is the QUIC configuration; incomingStreams is how many
// bidirectional streams the peer may open: the acceptor opens the one stream
// of a connection, so a listener allows none and a dialer one.
func (n *node) quicConfig(incomingStreams int64) *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout:       n.lim.HandshakeTimeout / 2, // quic-go allows twice this in all
		MaxIdleTimeout:             n.lim.IdleTimeout,
		KeepAlivePeriod:            n.lim.IdleTimeout / 3,
		MaxIncomingStreams:         incomingStreams,
		MaxIncomingUniStreams:      -1,
		MaxStreamReceiveWindow:     2 << 20,
		MaxConnectionReceiveWindow: 3 << 20,
	}
}

// startDialers starts the dialers set up before the node was running.
func (n *node) startDialers() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, d := range n.peers() {
		n.wg.Add(1)
		go d.run()
	}
}

// peers is the current dialer of each server this node talks to. The map is
// never modified: SetServers replaces it.
func (n *node) peers() map[wire.ServerID]*dialer { return *n.dialers.Load() }

// errNotMember and errMoved are why a dialer was stopped, sent to the server
// as the reason its connection closed.
var (
	errNotMember = errors.New("no longer a member")
	errMoved     = errors.New("this server's address changed")
)

var _ Reconfigurable = (*node)(nil)

var _ Retrustable = (*node)(nil)

// SetCAPool implements Retrustable: connections made from now on are
// verified under pool.
func (n *node) SetCAPool(pool *x509.CertPool) {
	if pool != nil {
		n.caPool.Store(pool)
	}
}

// SetServers implements Reconfigurable.
func (n *node) SetServers(addrs map[wire.ServerID]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	added, removed := n.replaceDialersLocked(addrs)
	if len(added) == 0 && len(removed) == 0 {
		return
	}
	var gone, moved, dialed []string
	for _, d := range removed {
		if nd := n.peers()[d.id]; nd != nil {
			d.stop(errMoved)
			moved = append(moved, fmt.Sprintf("%s %s->%s", ServerPeer(d.id), d.addr, nd.addr))
			continue
		}
		d.stop(errNotMember)
		gone = append(gone, ServerPeer(d.id).String())
		// Its connection to us goes too; verifyInbound refuses the next.
		if c := n.srvIn[d.id]; c != nil {
			n.wg.Go(func() { _ = c.CloseWithError(codeRefused, errNotMember.Error()) })
		}
	}
	for _, d := range added {
		if d.prev == nil {
			dialed = append(dialed, fmt.Sprintf("%s %s", ServerPeer(d.id), d.addr))
		}
		n.wg.Add(1)
		go d.run()
	}
	n.log.Info("transport: servers changed", "added", dialed, "removed", gone, "moved", moved, "peers", len(n.peers()))
}

// replaceDialersLocked makes addrs the set of dialers: it keeps the dialer of
// an unchanged server, makes one (not started) for a new or moved server, and
// returns the new ones and the ones that left the set (not stopped). n.mu is
// held.
func (n *node) replaceDialersLocked(addrs map[wire.ServerID]string) (added, removed []*dialer) {
	old := n.peers()
	next := make(map[wire.ServerID]*dialer, len(addrs))
	for id, addr := range addrs {
		if (n.server && id == n.self) || addr == "" {
			continue
		}
		prev := old[id]
		if prev != nil && prev.addr == addr {
			next[id] = prev
			continue
		}
		d := n.newDialer(id, addr, prev)
		next[id] = d
		added = append(added, d)
	}
	for id, d := range old {
		if next[id] != d {
			removed = append(removed, d)
		}
	}
	n.dialers.Store(&next)
	return added, removed
}

// Send implements Transport.
func (n *node) Send(to Peer, msg *wire.Message) error {
	if n.isClosed.Load() {
		return ErrClosed
	}
	to = norm(to)
	var q *sendQueue
	var cc *clientConn
	if to.IsClient {
		if !n.server {
			return fmt.Errorf("%w: %s (clients talk only to servers)", ErrUnknownPeer, to)
		}
		n.mu.Lock()
		if cs := n.clients[to.Client]; len(cs) > 0 {
			cc = cs[len(cs)-1]
		}
		n.mu.Unlock()
		if cc == nil {
			return fmt.Errorf("%w: %s", ErrNotConnected, to)
		}
		q = cc.q
	} else {
		d := n.peers()[to.Server]
		if d == nil {
			return fmt.Errorf("%w: %s", ErrUnknownPeer, to)
		}
		q = d.q
	}
	frame, err := encodeFrame(msg, n.lim.MaxFrame)
	if err != nil {
		return err
	}
	if t := n.tamper.Load(); t != nil {
		if frame = (*t)(to, frame); frame == nil {
			return nil
		}
	}
	err = q.push(frame)
	if err != nil && cc != nil && cc.slow.CompareAndSwap(false, true) {
		// A slow consumer: drop it rather than wait for it. Its writer may be
		// stuck in a flow-controlled write, so the close starts here.
		n.peerWarn("transport: slow consumer; closing its connection", "peer", to, "addr", cc.conn.RemoteAddr(), "queue", n.lim.QueueLen)
		n.spawn(func() { _ = cc.conn.CloseWithError(codeSlow, "slow consumer: the send queue overflowed") })
	}
	return err
}

// spawn runs f on a goroutine that Close waits for, unless we are closing.
func (n *node) spawn(f func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.wg.Go(f)
}

// Inbound implements Transport.
func (n *node) Inbound() <-chan Inbound { return n.inbound }

// Close implements Transport: it stops accepting and dialing, closes every
// connection with an application error code (0, "transport closing"), waits
// for every goroutine it started, and closes Inbound.
func (n *node) Close() error {
	n.closeOnce.Do(func() {
		n.isClosed.Store(true)
		n.mu.Lock()
		n.closed = true
		conns := make([]*quic.Conn, 0, len(n.conns))
		for c := range n.conns {
			conns = append(conns, c)
		}
		n.mu.Unlock()
		n.cancel()
		if n.ln != nil {
			_ = n.ln.Close()
		}
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Go(func() { _ = c.CloseWithError(codeShutdown, "transport closing") })
		}
		wg.Wait()
		_ = n.tr.Close()
		n.wg.Wait()
		_ = n.udp.Close()
		close(n.inbound)
		n.log.Info("transport: closed")
	})
	return nil
}

// track records c so that Close closes it; false if we are closing.
func (n *node) track(c *quic.Conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.conns[c] = struct{}{}
	return true
}

func (n *node) untrack(c *quic.Conn) {
	n.mu.Lock()
	delete(n.conns, c)
	n.mu.Unlock()
}

// deliver hands in to the consumer, or gives up when we are closing.
func (n *node) deliver(in Inbound) bool {
	select {
	case n.inbound <- in:
		return true
	case <-n.ctx.Done():
		return false
	}
}

// tokenBucket limits the rate of new connections.
