package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/bq-lock/bq/agent"
	"github.com/bq-lock/bq/cmd/internal/cli"
)

type agentOpts struct {
	socket, socketGroup, socketMode string
	httpAddr, tokenFile             string
	public, noSocket                bool
	ttl                             time.Duration
	ttlSet                          bool
	maxStreams, maxHolds, maxConns  int
	maxWatches                      int
	ping                            time.Duration
	logLevel                        string
}

func agentCmd(g *globals, std stdio) *cobra.Command {
	o := agentOpts{}
	cmd := &cobra.Command{
		Use:   "agent [--socket PATH] [--http 127.0.0.1:PORT --token-file FILE]",
		Short: "Serve this identity's locks to local programs over HTTP/JSON (any language)",
		Long: `agent connects to the cluster with this identity and serves an HTTP/JSON API, so that a program
in any language takes, holds and releases locks, hears the moment it loses one, and elects leaders,
with plain HTTP: the quorums, signatures and leases run here. One agent serves many programs at once;
each hold is named by an unguessable lock_id that only its holder knows. The API is in
docs/agent.md, and its OpenAPI document at GET /v1/openapi.yaml.

By default it listens on a Unix socket only its user can open (IDENTITY with .sock for .key, or
--socket). --http adds a loopback TCP listener that wants the bearer token of --token-file (made if
missing). It never listens beyond loopback unless --public says so, and then only with the token.

SIGTERM or SIGINT stop it: streams say lost ("agent_stopping"), and every hold is released once
its caller does, or the loss grace later.`,
		Example: `  bqclient agent &
  curl --unix-socket ~/.config/bq/identity.sock -X POST localhost/v1/locks/deploy/acquire -d '{"wait": 30}'
  bqclient agent --http 127.0.0.1:7480 --token-file agent.token`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.ttlSet = cmd.Flags().Changed("ttl")
			return runAgent(g, std, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.socket, "socket", os.Getenv("BQ_AGENT_SOCKET"), "the Unix socket to serve on (BQ_AGENT_SOCKET; default: the identity file with .sock for .key)")
	f.StringVar(&o.socketMode, "socket-mode", "0600", "the socket's file mode: 0600 for this user, 0660 with --socket-group")
	f.StringVar(&o.socketGroup, "socket-group", "", "the group that may open the socket too (with --socket-mode 0660)")
	f.BoolVar(&o.noSocket, "no-socket", false, "serve no Unix socket (with --http)")
	f.StringVar(&o.httpAddr, "http", "", "also serve on this TCP address (loopback unless --public), with --token-file")
	f.StringVar(&o.tokenFile, "token-file", "", "the bearer token TCP callers must send (made, mode 0600, if missing)")
	f.BoolVar(&o.public, "public", false, "let --http listen beyond loopback (the token still required)")
	f.DurationVar(&o.ttl, "ttl", 10*time.Second, "the session's lease TTL: a killed agent's holds are released within about 2×TTL")
	f.IntVar(&o.maxStreams, "max-streams", 1024, "streams and long polls open at once")
	f.IntVar(&o.maxHolds, "max-holds", 4096, "holds and acquires in progress at once")
	f.IntVar(&o.maxConns, "max-conns", 2048, "connections open at once, per listener")
	f.IntVar(&o.maxWatches, "max-watches", 256, "locks whose status long polls watch at once")
	f.DurationVar(&o.ping, "ping", 5*time.Second, "how often a stream says it is alive (a caller may ask for another)")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// agentSocket is the default socket of an identity file: beside it, .sock
// for its extension.
func agentSocket(identity string) string {
	return strings.TrimSuffix(identity, filepath.Ext(identity)) + ".sock"
}

func runAgent(g *globals, std stdio, o agentOpts) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return cli.Usagef("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	mode, err := strconv.ParseUint(o.socketMode, 8, 32)
	if err != nil || mode&^0o777 != 0 || mode&0o007 != 0 {
		return cli.Usagef("--socket-mode %q: want an octal mode with nothing for others, like 0600 or 0660", o.socketMode)
	}
	if o.noSocket && o.httpAddr == "" {
		return cli.Usagef("--no-socket needs --http: the agent must serve somewhere")
	}
	if o.httpAddr != "" {
		if o.tokenFile == "" {
			return cli.Usagef("--http needs --token-file: TCP callers must send its bearer token")
		}
		if !o.public && !agent.IsLoopback(o.httpAddr) {
			return cli.Usagef("--http %s is not a loopback address: give --public to serve beyond this machine (with the token)", o.httpAddr)
		}
	}
	if o.maxStreams < 1 || o.maxHolds < 1 || o.maxConns < 1 || o.maxWatches < 1 {
		return cli.Usagef("--max-streams, --max-holds, --max-conns and --max-watches are at least 1")
	}
	if o.ping < 100*time.Millisecond || o.ping > time.Minute {
		return cli.Usagef("--ping %v: want 100ms to 1m", o.ping)
	}
	log := slog.New(slog.NewTextHandler(std.err, &slog.HandlerOptions{Level: level}))

	sigCtx, _, stop := signals()
	defer stop()
	var token []byte
	if o.httpAddr != "" {
		if token, err = agent.ReadToken(o.tokenFile, func(b []byte) error { _, err := rand.Read(b); return err }); err != nil {
			return &failure{Code: exitError, Msg: "--token-file: " + err.Error()}
		}
	}
	c, err := dial(sigCtx, g, &o.ttl, o.ttlSet, std.err)
	if err != nil {
		return fail(err)
	}
	defer leave(c)
	a, err := agent.New(agent.Config{
		Client: c, ReleaseLostAfter: lossGrace(o.ttl) + o.ttl/10,
		MaxStreams: o.maxStreams, MaxHolds: o.maxHolds, MaxWatches: o.maxWatches, Ping: o.ping, Logger: log,
	})
	if err != nil {
		return fail(err)
	}

	// Each listener has its server: the Unix socket's asks no token (its
	// file mode guards it), the TCP one wants the token.
	type listener struct {
		l     net.Listener
		srv   *http.Server
		where string
	}
	var listeners []listener
	closeAll := func() {
		for _, l := range listeners {
			l.l.Close()
		}
	}
	if !o.noSocket {
		path := o.socket
		if path == "" {
			path = agentSocket(g.identity)
		}
		l, err := agent.ListenUnix(path, fs.FileMode(mode), o.socketGroup)
		if err != nil {
			return &failure{Code: exitError, Msg: "--socket: " + err.Error()}
		}
		listeners = append(listeners, listener{agent.LimitListener(l, o.maxConns), a.Server(nil), "unix:" + path})
	}
	if o.httpAddr != "" {
		l, err := net.Listen("tcp", o.httpAddr)
		if err != nil {
			closeAll()
			return &failure{Code: exitError, Msg: "--http: " + err.Error()}
		}
		listeners = append(listeners, listener{agent.LimitListener(l, o.maxConns), a.Server(token), "http://" + l.Addr().String()})
	}
	errs := make(chan error, len(listeners))
	var where []string
	for _, l := range listeners {
		go func() { errs <- l.srv.Serve(l.l) }()
		where = append(where, l.where)
	}
	fmt.Fprintf(std.err, "bqclient: agent of client id %s serving on %s (TTL %v); stop with SIGTERM\n",
		c.ID().Hex()[:16], strings.Join(where, " and "), o.ttl)

	var serveErr error
	select {
	case <-sigCtx.Done():
	case serveErr = <-errs:
	}
	// Stop: streams end and holds are released (Shutdown), while the
	// server stops taking requests and waits for the handlers.
	ctx, cancel := context.WithTimeout(context.Background(), lossGrace(o.ttl)+o.ttl/10+unlockWait)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = a.Shutdown(ctx)
	}()
	for _, l := range listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = l.srv.Shutdown(ctx)
		}()
	}
	wg.Wait()
	closeAll()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return &failure{Code: exitError, Msg: "serving: " + serveErr.Error()}
	}
	return nil
}

// unlockWait is what Shutdown gives the releases beyond the loss grace.
const unlockWait = 5 * time.Second
