package agent

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bq-lock/bq"
)

// Config configures an Agent. Zero fields take the defaults.
type Config struct {
	// Client is the identity's client. The agent uses it, and never closes
	// it: its owner does, after Shutdown.
	Client *bq.Client
	// ReleaseLostAfter is how long after a hold is lost (or expires, or the
	// agent stops) it is released at the servers unless its caller releases
	// it first: the time the caller's work has to stop. Give the client's
	// LossGrace and the servers' margin, TTL/10 (default 2 s).
	ReleaseLostAfter time.Duration
	// MaxStreams bounds the streams and long polls open at once (default
	// 1024); MaxHolds the holds and acquires in progress (default 4096,
	// also the request ids and ended holds remembered); MaxWatches the locks
	// whose status long polls watch at once (default 256).
	MaxStreams, MaxHolds, MaxWatches int
	// Ping is how often a stream says it is alive (default 5 s).
	Ping time.Duration
	// ClaimWindow is how long an acquire with a request_id outlives its
	// callers (default 30 s).
	ClaimWindow time.Duration
	Logger      *slog.Logger
}

// retainEnded is how long an ended hold is remembered, so that a caller
// asking about it hears how it ended.
const retainEnded = 5 * time.Minute

// Agent serves one client identity over HTTP/JSON.
type Agent struct {
	cfg Config
	c   *bq.Client
	log *slog.Logger

	holds    *holdTable
	requests requests
	streams  atomic.Int64 // streams and long polls open now (≤ cfg.MaxStreams)
	watches  watches
	dapr     daprLocks

	// stopping is closed when Shutdown begins; stopCtx ends then, with
	// errStopping.
	stopping chan struct{}
	stopOnce sync.Once
	stopCtx  context.Context
	stop     context.CancelCauseFunc
	wg       sync.WaitGroup // the goroutines the agent started

	mux *http.ServeMux
}

// New makes the agent of cfg.Client.
func New(cfg Config) (*Agent, error) {
	if cfg.Client == nil {
		return nil, errors.New("agent: no client")
	}
	if cfg.ReleaseLostAfter <= 0 {
		cfg.ReleaseLostAfter = 2 * time.Second
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = 1024
	}
	if cfg.MaxHolds <= 0 {
		cfg.MaxHolds = 4096
	}
	if cfg.MaxWatches <= 0 {
		cfg.MaxWatches = 256
	}
	if cfg.Ping <= 0 {
		cfg.Ping = 5 * time.Second
	}
	if cfg.ClaimWindow <= 0 {
		cfg.ClaimWindow = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &Agent{
		cfg: cfg, c: cfg.Client, log: cfg.Logger,
		holds:    newHoldTable(cfg.MaxHolds, retainEnded),
		requests: requests{byKey: make(map[reqKey]*attempt), max: cfg.MaxHolds},
		watches:  watches{byName: make(map[string]*lockWatch), max: cfg.MaxWatches},
		dapr:     daprLocks{byRes: make(map[string]daprLock)},
		stopping: make(chan struct{}),
	}
	a.stopCtx, a.stop = context.WithCancelCause(context.Background())
	a.routes()
	return a, nil
}

// Handler is the agent's HTTP API for one listener. With a token, every
// request must carry it as "Authorization: Bearer TOKEN" (a TCP listener);
// with none, nothing is asked (a Unix socket, guarded by its file mode).
func (a *Agent) Handler(token []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != nil && !authorized(r, token) {
			writeError(w, &Error{Code: CodeUnauthorized, Message: "this agent wants \"Authorization: Bearer TOKEN\", TOKEN from its --token-file"})
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		a.mux.ServeHTTP(w, r)
	})
}

func authorized(r *http.Request, token []byte) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), token) == 1
}

// Server is an http.Server for the agent's Handler(token), with the bounds a
// local caller cannot stretch: the head of a request within 5 s, its body
// within 30 s, 16 KiB of headers, idle connections closed after 2 minutes.
// Streams and long polls write for as long as they last. It speaks HTTP/1.1
// and HTTP/2 without TLS (prior knowledge: curl --http2-prior-knowledge),
// both from the standard library; an HTTP/2 connection carries at most 250
// streams at once, and each counts against MaxStreams like any other.
func (a *Agent) Server(token []byte) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{
		Protocols:         &protocols,
		Handler:           a.Handler(token),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return context.Background() },
	}
}

// Shutdown stops the agent: streams and long polls end (holds with a lost
// event, "agent_stopping"), every hold is released — a caller that does not
// release its own first has ReleaseLostAfter to stop its work — and
// Shutdown returns once all are, or ctx ends. It does not close the client.
func (a *Agent) Shutdown(ctx context.Context) error {
	a.stopOnce.Do(func() {
		close(a.stopping)
		a.stop(errStopping)
	})
	done := make(chan struct{})
	go func() {
		a.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopped reports whether Shutdown began.
func (a *Agent) stopped() bool {
	select {
	case <-a.stopping:
		return true
	default:
		return false
	}
}

// openStream takes a place for a stream or a long poll; done gives it back.
func (a *Agent) openStream() (done func(), _ *Error) {
	if a.stopped() {
		return nil, &Error{Code: CodeAgentStopping, Message: "the agent is shutting down"}
	}
	if a.streams.Add(1) > int64(a.cfg.MaxStreams) {
		a.streams.Add(-1)
		return nil, &Error{Code: CodeTooMany, Message: "the agent has as many streams and long polls open as it takes (--max-streams): close one, or poll less often"}
	}
	var once sync.Once
	return func() { once.Do(func() { a.streams.Add(-1) }) }, nil
}
