package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/internal/testcluster"
)

func TestMain(m *testing.M) {
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait for an event; generous for -race on a busy
// two-core machine. A test that needs it has already failed.
const waitTimeout = 15 * time.Second

// env is a cluster, one client and its agent on a Unix socket.
type env struct {
	t    testing.TB
	tc   *testcluster.Cluster
	c    *bq.Client
	a    *Agent
	sock string
	cl   *http.Client
}

// newEnv starts a 4-server open cluster and an agent of a fresh identity.
func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	return newEnvOn(t, testcluster.Start(t, 4, false), cfg, bq.Config{})
}

// newEnvOn starts an agent on cluster tc with its client dialed as dial
// says (default: a fresh key, TTL 2 s, a loss grace of 200 ms).
func newEnvOn(t testing.TB, tc *testcluster.Cluster, cfg Config, dial bq.Config) *env {
	return newEnvWith(t, tc, cfg, dial, nil)
}

// newEnvWith is newEnvOn with a listener that wants token (nil: none).
func newEnvWith(t testing.TB, tc *testcluster.Cluster, cfg Config, dial bq.Config, token []byte) *env {
	t.Helper()
	if dial.Cluster == nil && dial.ClusterFile == "" {
		dial.Cluster = tc.Cluster
	}
	if dial.Identity == nil && dial.IdentityFile == "" {
		dial.Identity = tc.Key()
	}
	if dial.TTL == 0 {
		dial.TTL, dial.LossGrace = 2*time.Second, 200*time.Millisecond
	}
	dial.ExitLostOnUnlock = true
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := bq.Dial(ctx, dial)
	require.NoError(t, err)
	cfg.Client = c
	if cfg.ReleaseLostAfter == 0 {
		cfg.ReleaseLostAfter = dial.LossGrace + dial.TTL/10
	}
	a, err := New(cfg)
	require.NoError(t, err)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := ListenUnix(sock, 0o600, "")
	require.NoError(t, err)
	srv := a.Server(token)
	go func() { _ = srv.Serve(l) }()
	e := &env{t: t, tc: tc, c: c, a: a, sock: sock, cl: unixClient(sock)}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		require.NoError(t, a.Shutdown(ctx))
		require.NoError(t, srv.Shutdown(ctx))
		e.cl.CloseIdleConnections()
		_ = c.Close()
	})
	return e
}

// unixClient is an HTTP client of the agent at sock.
func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 128,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

// call makes a request and decodes the answer into out (if not nil); it
// returns the status.
func (e *env) call(method, path string, body any, out any) int {
	e.t.Helper()
	return e.callCtx(context.Background(), method, path, body, out)
}

func (e *env) callCtx(ctx context.Context, method, path string, body any, out any) int {
	e.t.Helper()
	resp, err := e.cl.Do(e.request(ctx, method, path, body))
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	if out != nil {
		require.NoError(e.t, json.Unmarshal(b, out), "answer: %s", b)
	}
	return resp.StatusCode
}

func (e *env) request(ctx context.Context, method, path string, body any) *http.Request {
	e.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		require.NoError(e.t, err)
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, r)
	require.NoError(e.t, err)
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// errorOf is an error answer's body.
type errorBody struct {
	Error *Error `json:"error"`
}

// acquire takes name through the agent (body: the acquire's fields) and
// requires a hold.
func (e *env) acquire(name string, body any) *HoldView {
	e.t.Helper()
	var h HoldView
	require.Equal(e.t, http.StatusOK, e.call("POST", "/v1/locks/"+name+"/acquire", body, &h))
	require.Equal(e.t, stateHeld, h.State)
	return &h
}

// openStream is a stream's events, read as they come.
type openStream struct {
	events chan Event
	cancel context.CancelFunc
	status int
}

// stream opens a stream request; its events arrive on events (closed when
// the stream ends); cancel closes it.
func (e *env) stream(method, path string, body any) *openStream {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := e.cl.Do(e.request(ctx, method, path, body))
	require.NoError(e.t, err)
	s := &openStream{events: make(chan Event, 64), cancel: cancel, status: resp.StatusCode}
	go func() {
		defer close(s.events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev Event
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				ev = Event{Event: "unparsed: " + sc.Text()}
			}
			s.events <- ev
		}
	}()
	e.t.Cleanup(cancel)
	return s
}

// next waits for the stream's next event other than ping and waiting.
func (s *openStream) next(t *testing.T) Event {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case ev, ok := <-s.events:
			require.True(t, ok, "the stream ended")
			if ev.Event == "ping" || ev.Event == "waiting" {
				continue
			}
			return ev
		case <-timeout:
			require.FailNow(t, "no event within the wait")
		}
	}
}

// status reads a lock's status through the agent.
func (e *env) status(name string, query string) *LockStatusView {
	e.t.Helper()
	var st LockStatusView
	require.Equal(e.t, http.StatusOK, e.call("GET", "/v1/locks/"+name+query, nil, &st))
	return &st
}

// dial connects another client to the agent's cluster (a fresh key).
func (e *env) dial() *bq.Client {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := bq.Dial(ctx, bq.Config{Cluster: e.tc.Cluster, Identity: e.tc.Key(), TTL: 2 * time.Second})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}
