package transport

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bq-lock/bq/wire"
	"github.com/quic-go/quic-go"
)

// ---------------------------------------------------------------------------
// Accepting (servers).

// connContext runs before quic-go spends anything on a new connection: it
// applies the accept rate and the cap on connections held at once. Servers
// get a few places above MaxClientConns so that clients cannot crowd them out.
func (n *node) connContext(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	now := time.Now()
	n.mu.Lock()
	var reason, limit string
	switch {
	case n.closed:
		reason = "closing"
	case n.accepted >= n.lim.MaxClientConns+2*len(n.peers())+2:
		reason, limit = fmt.Sprintf("%d connections open", n.accepted), "max_client_connections"
	case !n.allowAddress(info.RemoteAddr, now):
		reason, limit = "accept rate of this address exceeded", "accept_rate_per_address"
	case !n.accept.AllowN(now, 1):
		reason, limit = "accept rate exceeded", "accept_rate"
	}
	if reason != "" {
		n.mu.Unlock()
		if limit != "" {
			n.peerWarn("transport: refusing new connections", "addr", info.RemoteAddr, "reason", reason)
			if n.onLimit != nil {
				n.onLimit(limit)
			}
		}
		return nil, errors.New("transport: " + reason)
	}
	n.accepted++
	n.mu.Unlock()
	context.AfterFunc(ctx, func() {
		n.mu.Lock()
		n.accepted--
		n.mu.Unlock()
	})
	return ctx, nil
}

func (n *node) acceptLoop() {
	defer n.wg.Done()
	for {
		conn, err := n.ln.Accept(n.ctx)
		if err != nil {
			return
		}
		if !n.track(conn) {
			_ = conn.CloseWithError(codeShutdown, "transport closing")
			continue
		}
		n.wg.Add(1)
		go n.serveConn(conn)
	}
}

// serveConn runs one accepted connection to its end. The TLS handshake is
// over: a presented certificate was verified in verifyInbound.
func (n *node) serveConn(conn *quic.Conn) {
	defer n.wg.Done()
	defer n.untrack(conn)
	defer func() { _ = conn.CloseWithError(codeShutdown, "") }()
	deadline := time.Now().Add(n.lim.HandshakeTimeout)
	if certs := conn.ConnectionState().TLS.PeerCertificates; len(certs) > 0 {
		id, ok := n.identify(certs[0])
		if !ok { // verifyInbound let it through, so this is our bug
			panic("transport: accepted a server certificate that IdentifyServer does not know")
		}
		n.serveServer(conn, id, deadline)
		return
	}
	n.serveClient(conn, deadline)
}

// openStream opens the one stream of an accepted connection and sends the
// Challenge on it.
func (n *node) openStream(conn *quic.Conn, deadline time.Time) (*quic.Stream, []byte, error) {
	ctx, cancel := context.WithDeadline(n.ctx, deadline)
	s, err := conn.OpenStreamSync(ctx)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	_ = s.SetDeadline(deadline)
	nonce := make([]byte, wire.NonceSize)
	_, _ = crand.Read(nonce)
	if err := writeMsg(s, &wire.Message{Challenge: &wire.Challenge{Server: n.self, Nonce: nonce, Cluster: n.cluster, Version: n.version}}); err != nil {
		return nil, nil, err
	}
	return s, nonce, nil
}

func (n *node) serveServer(conn *quic.Conn, id wire.ServerID, deadline time.Time) {
	peer := ServerPeer(id)
	s, _, err := n.openStream(conn, deadline)
	if err != nil {
		n.log.Info("transport: server connection failed during set-up", "peer", peer, "addr", conn.RemoteAddr(), "err", err)
		return
	}
	_ = s.SetDeadline(time.Time{})
	n.mu.Lock()
	if n.peers()[id] == nil {
		// SetServers let it go since verifyInbound let it in.
		n.mu.Unlock()
		_ = conn.CloseWithError(codeRefused, errNotMember.Error())
		return
	}
	old := n.srvIn[id]
	n.srvIn[id] = conn
	n.mu.Unlock()
	if old != nil {
		_ = old.CloseWithError(codeReplaced, "replaced by a newer connection")
	}
	n.log.Info("transport: accepted server connection", "peer", peer, "addr", conn.RemoteAddr(), "auth", "mutual TLS")
	err = n.readLoop(conn, s, peer, n.preverifyFor(peer, false))
	n.mu.Lock()
	if n.srvIn[id] == conn {
		delete(n.srvIn, id)
	}
	n.mu.Unlock()
	if n.ctx.Err() == nil {
		n.log.Info("transport: accepted server connection closed", "peer", peer, "reason", err)
	}
}

func (n *node) serveClient(conn *quic.Conn, deadline time.Time) {
	n.mu.Lock()
	n.clientConns++
	over := n.clientConns > n.lim.MaxClientConns
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.clientConns--
		n.mu.Unlock()
	}()

	s, nonce, err := n.openStream(conn, deadline)
	if err != nil {
		return
	}
	if over {
		n.refuseClient(conn, s, wire.ErrCodeLimit, codeLimit, fmt.Sprintf("this server holds its maximum of %d client connections", n.lim.MaxClientConns))
		if n.onLimit != nil {
			n.onLimit("max_client_connections")
		}
		return
	}
	b, err := readFrame(s, maxHandshakeFrame)
	if err != nil {
		if errors.Is(err, errFrameTooLarge) {
			n.refuseClient(conn, s, wire.ErrCodeMalformed, codeHandshake, "hello: "+err.Error())
		} else if n.ctx.Err() == nil {
			n.peerWarn("transport: client connection ended before its hello", "addr", conn.RemoteAddr(), "err", err)
			_ = conn.CloseWithError(codeHandshake, "no hello")
		}
		return
	}
	m, err := wire.Decode(b)
	if err != nil || m.Hello == nil {
		if err == nil {
			err = fmt.Errorf("got %s", m)
		}
		n.refuseClient(conn, s, wire.ErrCodeMalformed, codeHandshake, "expected a hello: "+err.Error())
		return
	}
	exporter, err := exportHello(conn)
	if err != nil {
		n.refuseClient(conn, s, wire.ErrCodeInternal, codeHandshake, "no TLS exporter: "+err.Error())
		return
	}
	if m.Hello.Version.Major != n.version.Major {
		// The ALPN already keeps other majors out; this is the Hello's
		// word for it. Not a fault of the client's: an upgrade in progress.
		n.log.Info("transport: refused a client of another protocol version", "addr", conn.RemoteAddr(), "client", m.Hello.Version, "speaks", n.version)
		n.tellAndClose(conn, s, wire.ErrCodeNotAllowed, codeRefused,
			fmt.Sprintf("this server speaks protocol %s, the client %s: upgrade the older side", n.version, m.Hello.Version))
		return
	}
	key, err := verifyHello(m.Hello, n.cluster, nonce, exporter)
	if err != nil {
		n.refuseClient(conn, s, wire.ErrCodeNotAllowed, codeRefused, err.Error())
		return
	}
	var grant *wire.AdmissionBody
	if n.admit != nil {
		// An observer is admitted as the key it proved (change 32).
		if grant, err = n.admit(key, m.Hello.Admission); err != nil {
			n.refuseClient(conn, s, wire.ErrCodeNotAllowed, codeRefused, fmt.Sprintf("client %s is not admitted: %v", key.Hex()[:16], err))
			return
		}
	}
	id := key
	var observes *wire.ClientID
	if m.Hello.Observe {
		id, observes = wire.ObserverID(key, nonce), &key
	}
	if err := writeMsg(s, &wire.Message{Welcome: &wire.Welcome{Client: id}}); err != nil {
		return
	}
	_ = s.SetDeadline(time.Time{})

	peer := ClientPeer(id)
	cc := &clientConn{id: id, observes: observes, conn: conn, q: newSendQueue(n.lim)}
	for _, old := range n.bind(cc) {
		n.log.Info("transport: client connection replaced by a newer one", "peer", ClientPeer(old.id), "addr", old.conn.RemoteAddr())
		n.spawn(func() { _ = old.conn.CloseWithError(codeReplaced, "replaced by a newer connection of the same client") })
	}
	n.log.Debug("transport: client connected", "peer", peer, "addr", conn.RemoteAddr(), "observes", observes)
	check := n.preverifyFor(peer, observes != nil)
	if !n.deliver(Inbound{Kind: EventConnected, From: peer, Admission: grant, Observes: observes}) {
		n.unbind(cc)
		return
	}
	var w sync.WaitGroup
	w.Go(func() { n.writeLoop(conn, s, cc.q) })
	err = n.readLoop(conn, s, peer, check)
	_ = conn.CloseWithError(codeShutdown, "")
	w.Wait()
	if n.unbind(cc) {
		n.log.Debug("transport: client disconnected", "peer", peer, "reason", err)
		n.deliver(Inbound{Kind: EventDisconnected, From: peer})
	}
}

// refuseClient tells a client why it is refused (a wire Error), gives it a
// moment to read that and hang up, and closes the connection with code.
func (n *node) refuseClient(conn *quic.Conn, s *quic.Stream, code wire.ErrorCode, appCode quic.ApplicationErrorCode, reason string) {
	n.peerWarn("transport: refused a client connection", "addr", conn.RemoteAddr(), "code", code, "reason", reason)
	n.tellAndClose(conn, s, code, appCode, reason)
}

// tellAndClose sends the refusal's reason as a wire Error, gives the client a
// moment to read it, and closes the connection with appCode.
func (n *node) tellAndClose(conn *quic.Conn, s *quic.Stream, code wire.ErrorCode, appCode quic.ApplicationErrorCode, reason string) {
	detail := reason
	if len(detail) > wire.MaxDetail {
		detail = strings.ToValidUTF8(detail[:wire.MaxDetail], "")
	}
	_ = s.SetWriteDeadline(time.Now().Add(time.Second))
	if writeMsg(s, &wire.Message{Error: &wire.Error{Code: code, Detail: detail}}) == nil {
		_ = s.Close()
		t := time.NewTimer(time.Second)
		select {
		case <-conn.Context().Done():
		case <-t.C:
		case <-n.ctx.Done():
		}
		t.Stop()
	}
	_ = conn.CloseWithError(appCode, reason)
}

// peerWarn logs what a peer made happen: at Warn at most once a second, at
// Debug otherwise, so that no peer can flood the log.
func (n *node) peerWarn(msg string, args ...any) {
	now := time.Now()
	n.mu.Lock()
	warn := now.Sub(n.lastPeerWarn) >= time.Second
	if warn {
		n.lastPeerWarn = now
	}
	n.mu.Unlock()
	if warn {
		n.log.Warn(msg, args...)
	} else {
		n.log.Debug(msg, args...)
	}
}

// bind makes cc the newest connection of its client and returns the ones it
// pushes out. An observer connection has an id of its own and pushes out
// only the oldest observer of its client beyond MaxObserversPerClient,
// never the client's own connection (change 32).
func (n *node) bind(cc *clientConn) (evicted []*clientConn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := cc.observes; p != nil {
		os := append(n.observers[*p], cc)
		for len(os) > n.lim.MaxObserversPerClient {
			evicted = append(evicted, os[0])
			os = os[1:]
		}
		n.observers[*p] = os
	}
	cs := append(n.clients[cc.id], cc)
	for len(cs) > n.lim.MaxConnsPerClient {
		evicted = append(evicted, cs[0])
		cs = cs[1:]
	}
	n.clients[cc.id] = cs
	return evicted
}

// unbind forgets cc and reports whether its client has no connection left
// (false as well if cc was already replaced).
func (n *node) unbind(cc *clientConn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := cc.observes; p != nil {
		if os := slices.DeleteFunc(n.observers[*p], func(o *clientConn) bool { return o == cc }); len(os) > 0 {
			n.observers[*p] = os
		} else {
			delete(n.observers, *p)
		}
	}
	cs := n.clients[cc.id]
	i := slices.Index(cs, cc)
	if i < 0 {
		return false
	}
	cs = slices.Delete(cs, i, i+1)
	if len(cs) == 0 {
		delete(n.clients, cc.id)
		return true
	}
	n.clients[cc.id] = cs
	return false
}

// ---------------------------------------------------------------------------
// Dialing (servers to servers, clients to servers).

// dialer keeps the outbound connection to one server, at one address,
// until Close or SetServers stops it.
type dialer struct {
	n    *node
	id   wire.ServerID
	addr string
	// q outlives connections: what is queued while the server is
	// unreachable goes out when it is back. It dies with the dialer.
	q *sendQueue
	// ctx, a child of n.ctx, bounds the dialing and the connection; stop
	// cancels it with the reason the server is told.
	ctx  context.Context
	stop context.CancelCauseFunc
	// prev is the dialer of the same server that this one replaced (its
	// address changed), or nil: run starts once prev's has returned, so the
	// EventDisconnected of its connection comes before ours' EventConnected.
	prev *dialer
	done chan struct{} // closed when run returns
}

func (n *node) newDialer(id wire.ServerID, addr string, prev *dialer) *dialer {
	ctx, stop := context.WithCancelCause(n.ctx)
	return &dialer{n: n, id: id, addr: addr, q: newSendQueue(n.lim), ctx: ctx, stop: stop, prev: prev, done: make(chan struct{})}
}

func (d *dialer) run() {
	defer d.n.wg.Done()
	defer close(d.done)
	defer d.stop(nil)
	n := d.n
	if d.prev != nil {
		select {
		case <-d.prev.done:
		case <-d.ctx.Done():
			return
		}
		d.prev = nil
	}
	backoff := n.lim.BackoffMin
	for {
		lived, err := d.connectOnce()
		if d.ctx.Err() != nil {
			return
		}
		if lived >= n.lim.BackoffMax {
			backoff = n.lim.BackoffMin
		}
		wait := backoff/2 + rand.N(backoff+1) // ±50% jitter
		if err != nil {
			n.log.Warn("transport: cannot connect to server", "peer", ServerPeer(d.id), "addr", d.addr, "reason", err, "retry_in", wait.Round(time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-d.ctx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, n.lim.BackoffMax)
	}
}

// connectOnce dials, sets up and runs one connection. It returns how long
// the connection was up (0 if it never was) and, if it never was, why.
func (d *dialer) connectOnce() (time.Duration, error) {
	n := d.n
	peer := ServerPeer(d.id)
	raddr, err := net.ResolveUDPAddr("udp", d.addr)
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(n.lim.HandshakeTimeout)
	ctx, cancel := context.WithDeadline(d.ctx, deadline)
	defer cancel()
	conn, err := n.tr.Dial(ctx, raddr, n.dialTLS(d.id, d.addr), n.quicConfig(1))
	if err != nil {
		if noCommonVersion(err) {
			return 0, d.refused(fmt.Errorf("%s at %s speaks no protocol version this %s does (%s): upgrade the older side",
				d.id, d.addr, n.role(), n.version.ALPN()))
		}
		return 0, fmt.Errorf("dial: %w", err)
	}
	if !n.track(conn) {
		_ = conn.CloseWithError(codeShutdown, "transport closing")
		return 0, ErrClosed
	}
	defer n.untrack(conn)
	defer func() { _ = conn.CloseWithError(codeShutdown, "") }()
	// Stopped by SetServers: the connection closes, telling the server why.
	// (Close closes every connection itself.)
	closed := make(chan struct{})
	stopClose := context.AfterFunc(d.ctx, func() {
		defer close(closed)
		if n.ctx.Err() == nil {
			_ = conn.CloseWithError(codeShutdown, context.Cause(d.ctx).Error())
		}
	})
	defer func() {
		if !stopClose() {
			<-closed // so that it is done before n.wg is
		}
	}()

	// In TLS 1.3 the dialer finishes its handshake before the acceptor has
	// checked the dialer's certificate, so a refused certificate shows only
	// here, as the connection closing instead of the acceptor's stream.
	s, err := conn.AcceptStream(ctx)
	if err != nil {
		return 0, describeRefusal(err)
	}
	_ = s.SetDeadline(deadline)
	ch, err := readMsg(s)
	if err != nil {
		return 0, describeRefusal(err)
	}
	if ch.Challenge == nil || ch.Challenge.Server != d.id {
		_ = conn.CloseWithError(codeHandshake, "expected a challenge")
		return 0, fmt.Errorf("expected a challenge from %s, got %s", d.id, ch)
	}
	if ch.Challenge.Cluster != n.cluster {
		_ = conn.CloseWithError(codeHandshake, "another cluster")
		return 0, d.refused(fmt.Errorf("%s at %s is a server of cluster %s, not of this cluster %s (check the cluster file)",
			d.id, d.addr, ch.Challenge.Cluster, n.cluster))
	}
	if ch.Challenge.Version.Major != n.version.Major {
		_ = conn.CloseWithError(codeHandshake, "another protocol version")
		return 0, d.refused(fmt.Errorf("%s at %s speaks protocol %s, this %s %s: upgrade the older side",
			d.id, d.addr, ch.Challenge.Version, n.role(), n.version))
	}
	if n.observe && ch.Challenge.Version.Minor < 3 {
		_ = conn.CloseWithError(codeHandshake, "observer needs protocol 1.3")
		return 0, d.refused(fmt.Errorf("%s at %s speaks protocol %s: an observer connection (status, leader reads) needs 1.3 or newer: upgrade the server",
			d.id, d.addr, ch.Challenge.Version))
	}
	auth := "mutual TLS"
	if !n.server {
		auth = "server certificate and signed hello"
		if err := d.hello(conn, s, ch.Challenge.Nonce); err != nil {
			_ = conn.CloseWithError(codeHandshake, "")
			if errors.Is(err, errHelloRefused) {
				return 0, d.refused(err)
			}
			return 0, err
		}
	}
	_ = s.SetDeadline(time.Time{})

	n.log.Info("transport: connected to server", "peer", peer, "addr", d.addr, "auth", auth)
	up := time.Now()
	if !n.deliver(Inbound{Kind: EventConnected, From: peer, Version: ch.Challenge.Version}) {
		return 0, ErrClosed
	}
	var w sync.WaitGroup
	d.q.signal() // send what waited while we were away
	w.Go(func() { n.writeLoop(conn, s, d.q) })
	err = n.readLoop(conn, s, peer, n.preverifyFor(peer, false))
	_ = conn.CloseWithError(codeShutdown, "")
	w.Wait()
	n.deliver(Inbound{Kind: EventDisconnected, From: peer})
	if ae, ok := errors.AsType[*quic.ApplicationError](err); ok && ae.Remote && ae.ErrorCode == codeRefused && !n.server {
		// The server threw this client out (revoked, its certificate
		// expired or its CA retired: docs/protocol.md change 23): the
		// client hears why now, not at its next dial.
		d.refused(&RefusedError{Code: wire.ErrCodeNotAllowed, Detail: ae.ErrorMessage})
	}
	switch {
	case n.ctx.Err() != nil:
	case d.ctx.Err() != nil:
		n.log.Info("transport: connection to server closed", "peer", peer, "addr", d.addr, "reason", context.Cause(d.ctx))
	default:
		n.log.Info("transport: connection to server lost", "peer", peer, "reason", err)
	}
	return time.Since(up), nil
}

// hello runs the client's side of the set-up exchange.
func (d *dialer) hello(conn *quic.Conn, s *quic.Stream, nonce []byte) error {
	n := d.n
	exporter, err := exportHello(conn)
	if err != nil {
		return fmt.Errorf("TLS exporter: %w", err)
	}
	h, err := signHello(n.key, n.cluster, nonce, exporter, n.observe)
	if err != nil {
		return err
	}
	want := n.clientID
	if n.observe {
		want = wire.ObserverID(n.clientID, nonce)
	}
	h.Version = n.version
	h.Admission = n.admission
	if n.renewedAdmission != nil {
		if a := n.renewedAdmission(); a != nil {
			h.Admission = a
		}
	}
	if err := writeMsg(s, &wire.Message{Hello: h}); err != nil {
		return describeRefusal(err)
	}
	m, err := readMsg(s)
	if err != nil {
		return describeRefusal(err)
	}
	switch {
	case m.Error != nil:
		return &RefusedError{Code: m.Error.Code, Detail: m.Error.Detail}
	case m.Welcome == nil:
		return fmt.Errorf("expected a welcome, got %s", m)
	case m.Welcome.Client != want:
		return fmt.Errorf("welcomed as %s, not as %s", m.Welcome.Client, want)
	}
	return nil
}

// errHelloRefused: the server answered our Hello with an Error.
var errHelloRefused = errors.New("server refused us")

// RefusedError is the Err of an EventRefused whose server answered the
// Hello with an Error: Code says why (wire.ErrCodeNotAllowed for a client
// a closed cluster does not admit).
type RefusedError struct {
	Code   wire.ErrorCode
	Detail string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s: %s: %s", errHelloRefused, e.Code, e.Detail)
}

// Is makes a RefusedError an errHelloRefused.
func (e *RefusedError) Is(target error) bool { return target == errHelloRefused }

// refused reports to a client's user a refusal that retrying cannot mend
// (EventRefused), and returns it.
func (d *dialer) refused(err error) error {
	if !d.n.server {
		d.n.deliver(Inbound{Kind: EventRefused, From: ServerPeer(d.id), Err: err})
	}
	return err
}

func (n *node) role() string {
	if n.server {
		return "server"
	}
	return "client"
}

// noCommonVersion reports a TLS handshake the server refused for want of an
// application protocol in common: it speaks another major version.
func noCommonVersion(err error) bool {
	const noApplicationProtocol = 120 // TLS alert
	te, ok := errors.AsType[*quic.TransportError](err)
	return ok && te.Remote && te.ErrorCode == quic.TransportErrorCode(0x100+noApplicationProtocol)
}

// describeRefusal turns a connection error during set-up into a reason a
// reader of the logs can act on.
func describeRefusal(err error) error {
	if te, ok := errors.AsType[*quic.TransportError](err); ok && te.Remote && te.ErrorCode >= 0x100 && te.ErrorCode < 0x200 {
		return fmt.Errorf("the peer refused our TLS handshake (alert %d; for a server: our certificate was not accepted — see the peer's log): %w",
			te.ErrorCode-0x100, err)
	}
	if ae, ok := errors.AsType[*quic.ApplicationError](err); ok && ae.Remote {
		return fmt.Errorf("the peer closed the connection (code %d): %s", ae.ErrorCode, ae.ErrorMessage)
	}
	return err
}

// ---------------------------------------------------------------------------
// Moving frames.

// readLoop delivers the messages on s until the connection ends, and returns
// why it ended. Bad input closes the connection. check, if not nil, sees
// each message first (ServerConfig.Preverify).
func (n *node) readLoop(conn *quic.Conn, s *quic.Stream, from Peer, check func(*wire.Message)) error {
	r := bufio.NewReaderSize(s, 4<<10)
	for {
		b, err := readFrame(r, n.lim.MaxFrame)
		if err == nil {
			var m *wire.Message
			if m, err = decodeFrame(b, n.lim.MaxFrame); err == nil {
				if check != nil {
					check(m)
				}
				if !n.deliver(Inbound{Kind: EventMessage, From: from, Msg: m, Size: len(b)}) {
					return ErrClosed
				}
				continue
			}
			if errors.Is(err, wire.ErrUnknownKind) {
				// A newer minor version's message: skipped, never bad input.
				n.log.Debug("transport: skipped a message of a kind this version does not know", "peer", from, "bytes", len(b))
				continue
			}
		} else if !errors.Is(err, errFrameTooLarge) {
			return err // the connection or stream ended
		}
		bad := badInput(from, err, b)
		n.peerWarn("transport: bad input; closing the connection", "peer", from, "addr", conn.RemoteAddr(), "err", err)
		n.deliver(Inbound{Kind: EventBadInput, From: from, Err: bad})
		msg := err.Error()
		if len(msg) > 256 {
			msg = msg[:256]
		}
		_ = conn.CloseWithError(codeBadInput, msg)
		return bad
	}
}

// preverifyFor is the read loop's check of a connection from peer: none for
// an observer connection (it may not submit) or without ServerConfig.Preverify.
func (n *node) preverifyFor(peer Peer, observes bool) func(*wire.Message) {
	if n.preverify == nil || observes {
		return nil
	}
	return n.preverify(peer)
}

// writeLoop sends what q holds, in order, until the connection ends.
func (n *node) writeLoop(conn *quic.Conn, s *quic.Stream, q *sendQueue) {
	ctx := conn.Context()
	bw := bufio.NewWriterSize(s, 16<<10)
	var hdr [frameHeader]byte
	var batch [][]byte
	for {
		select {
		case <-q.wake:
		case <-ctx.Done():
			return
		}
		batch = q.take(batch[:0])
		for _, f := range batch {
			binary.BigEndian.PutUint32(hdr[:], uint32(len(f)))
			if _, err := bw.Write(hdr[:]); err != nil {
				return
			}
			if _, err := bw.Write(f); err != nil {
				return
			}
		}
		clear(batch)
		if err := bw.Flush(); err != nil {
			return
		}
	}
}

// writeMsg writes one set-up message as a single frame.
func writeMsg(w io.Writer, m *wire.Message) error {
	b, err := wire.Encode(m)
	if err != nil {
		return err
	}
	_, err = w.Write(appendFrame(make([]byte, 0, frameHeader+len(b)), b))
	return err
}

// readMsg reads one set-up message (small by construction).
func readMsg(r io.Reader) (*wire.Message, error) {
	b, err := readFrame(r, maxHandshakeFrame)
	if err != nil {
		return nil, err
	}
	return wire.Decode(b)
}

// exportHello is the TLS exporter value a Hello signs.
func exportHello(conn *quic.Conn) ([]byte, error) {
	cs := conn.ConnectionState().TLS
	return cs.ExportKeyingMaterial(helloExporterLabel, nil, exporterSize)
}

// DisconnectClient closes every connection of client c with reason (a
// revoked client, docs/protocol.md change 23). Servers only; the usual
// EventDisconnected follows.
func (n *node) DisconnectClient(c wire.ClientID, reason string) {
	n.mu.Lock()
	cs := slices.Concat(n.clients[c], n.observers[c]) // its observers go with it (change 32)
	n.mu.Unlock()
	for _, cc := range cs {
		n.spawn(func() { _ = cc.conn.CloseWithError(codeRefused, reason) })
	}
}
