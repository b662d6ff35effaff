package transport

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// quic-go warns once on stderr when it cannot enlarge the UDP buffers.
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait for an event; generous for -race on a busy machine.
const waitTimeout = 15 * time.Second

// ---------------------------------------------------------------------------
// A cluster PKI.

type testPKI struct {
	ca    *certs.CA
	pool  *x509.CertPool
	certs []tls.Certificate // by server id
}

func newPKI(t testing.TB, n int) *testPKI {
	t.Helper()
	ca, err := certs.NewCA("test", time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{ca: ca, pool: x509.NewCertPool()}
	p.pool.AddCert(ca.Cert)
	for i := range n {
		p.certs = append(p.certs, p.issue(t, i))
	}
	return p
}

func (p *testPKI) issue(t testing.TB, id int) tls.Certificate {
	t.Helper()
	der, key, err := p.ca.IssueServer(id, []string{"127.0.0.1"}, time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// identify is the exact cluster-file match.
func (p *testPKI) identify(c *x509.Certificate) (wire.ServerID, bool) {
	for i, tc := range p.certs {
		if bytes.Equal(tc.Certificate[0], c.Raw) {
			return wire.ServerID(i), true
		}
	}
	return 0, false
}

func newKey(t testing.TB) *crypto.PrivateKey {
	t.Helper()
	k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func clientOf(k *crypto.PrivateKey) Peer { return ClientPeer(wire.ClientID(k.Public.ID)) }

// freeAddrs reserves n loopback UDP ports (and lets them go at once).
func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	var conns []*net.UDPConn
	var addrs []string
	for range n {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		addrs = append(addrs, c.LocalAddr().String())
	}
	for _, c := range conns {
		c.Close()
	}
	return addrs
}

// ---------------------------------------------------------------------------
// Logs a test can wait on.

type logSink struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{}
}

func newLogSink(t testing.TB) (*logSink, *slog.Logger) {
	s := &logSink{changed: make(chan struct{})}
	t.Cleanup(func() {
		if t.Failed() {
			s.mu.Lock()
			defer s.mu.Unlock()
			t.Logf("log (%d lines):\n%s", len(s.lines), strings.Join(s.lines, ""))
		}
	})
	return s, slog.New(slog.NewTextHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.lines = append(s.lines, string(p))
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	return len(p), nil
}

// wait returns the first line holding every one of parts.
func (s *logSink) wait(t testing.TB, parts ...string) string {
	t.Helper()
	deadline := time.After(waitTimeout)
	for i := 0; ; {
		s.mu.Lock()
		for ; i < len(s.lines); i++ {
			if containsAll(s.lines[i], parts) {
				l := s.lines[i]
				s.mu.Unlock()
				return l
			}
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no log line with %q", parts)
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// ---------------------------------------------------------------------------
// Watching a transport's events.

// watcher drains a transport's Inbound into a list that tests wait on.
// next takes the earliest event not yet taken that matches, so events of one
// kind are taken in the order they came, whatever else came in between.
type watcher struct {
	name    string
	mu      sync.Mutex
	events  []Inbound
	taken   []bool
	first   int // every event before first is taken
	closed  bool
	changed chan struct{}
}

func watch(name string, tr Transport) *watcher {
	w := &watcher{name: name, changed: make(chan struct{})}
	go func() {
		for in := range tr.Inbound() {
			w.mu.Lock()
			w.events = append(w.events, in)
			w.taken = append(w.taken, false)
			close(w.changed)
			w.changed = make(chan struct{})
			w.mu.Unlock()
		}
		w.mu.Lock()
		w.closed = true
		close(w.changed)
		w.mu.Unlock()
	}()
	return w
}

// next waits for the earliest untaken event that matches, and takes it.
func (w *watcher) next(t testing.TB, what string, match func(Inbound) bool) Inbound {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		w.mu.Lock()
		for i := w.first; i < len(w.events); i++ {
			if !w.taken[i] && match(w.events[i]) {
				w.taken[i] = true
				for w.first < len(w.taken) && w.taken[w.first] {
					w.first++
				}
				in := w.events[i]
				w.mu.Unlock()
				return in
			}
		}
		ch, closed := w.changed, w.closed
		w.mu.Unlock()
		if closed {
			t.Fatalf("%s: Inbound closed while waiting for %s; saw:\n%s", w.name, what, w.dump())
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s: no %s within %s; saw:\n%s", w.name, what, waitTimeout, w.dump())
		}
	}
}

// all returns every event so far.
func (w *watcher) all() []Inbound {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Inbound(nil), w.events...)
}

func (w *watcher) dump() string {
	var b strings.Builder
	for i, in := range w.all() {
		fmt.Fprintf(&b, "  %d: %s\n", i, in)
	}
	return b.String()
}

func isEvent(k EventKind, from Peer) func(Inbound) bool {
	return func(in Inbound) bool { return in.Kind == k && in.From == from }
}

func connected(from Peer) func(Inbound) bool    { return isEvent(EventConnected, from) }
func disconnected(from Peer) func(Inbound) bool { return isEvent(EventDisconnected, from) }

func isMsg(from Peer, match func(*wire.Message) bool) func(Inbound) bool {
	return func(in Inbound) bool { return in.Kind == EventMessage && in.From == from && match(in.Msg) }
}

// sendRetry sends, waiting out ErrQueueFull (the caller's back-pressure).
func sendRetry(t testing.TB, tr Transport, to Peer, m *wire.Message) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		err := tr.Send(to, m)
		if err == nil {
			return
		}
		if !errors.Is(err, ErrQueueFull) || time.Now().After(deadline) {
			t.Fatalf("send %s to %s: %v", m, to, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// ---------------------------------------------------------------------------
// Messages.

func heartbeat(seq uint64) *wire.Message {
	return &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: seq}}
}

// bigSubmit is a Submit whose statement body has size bytes. Its signature
// is not valid, which the transport does not check.
func bigSubmit(t testing.TB, req uint64, size int) *wire.Message {
	t.Helper()
	body := bytes.Repeat([]byte{0xab}, size)
	return &wire.Message{Submit: &wire.Submit{Req: req, Statement: wire.SignedStatement{
		Key:    newKey(t).Public.Wire,
		Signed: crypto.Signed{Body: body, Sig: make([]byte, 64)},
	}}}
}
