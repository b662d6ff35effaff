package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

func cmdKeygen(g globals, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bqclient keygen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", g.identity, "where to write the key")
	scheme := fs.String("scheme", crypto.DefaultScheme, "signature scheme: "+strings.Join(crypto.Schemes(), ", "))
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return exitUsage
	}
	k, err := certs.NewIdentity(*out, *scheme, rand.Reader)
	if err != nil {
		fmt.Fprintln(stderr, "bqclient keygen:", err)
		return exitError
	}
	fmt.Fprintf(stdout, "wrote %s (%s); client id %s\n", *out, k.Scheme(), wire.ClientID(k.Public.ID).Hex())
	return exitOK
}

// dial connects with the global flags; it creates the identity on first use
// and says so.
func dial(ctx context.Context, g globals, ttl time.Duration, stderr io.Writer) (*bq.Client, error) {
	if _, err := certs.LoadIdentity(g.identity); errors.Is(err, certs.ErrNoIdentity) {
		cl, err := certs.LoadCluster(g.cluster)
		if err != nil {
			return nil, err
		}
		k, err := certs.NewIdentity(g.identity, cl.Scheme, rand.Reader)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(stderr, "bqclient: created identity %s (client id %s)\n", g.identity, wire.ClientID(k.Public.ID).Hex()[:16])
	}
	return bq.Dial(ctx, bq.Config{ClusterFile: g.cluster, IdentityFile: g.identity, TTL: ttl})
}

func cmdLock(g globals, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bqclient lock", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 0, "give up after this long (0: wait forever)")
	ttl := fs.Duration("ttl", 10*time.Second, "session lease: a silent holder loses the lock within about this long")
	try := fs.Bool("try", false, "do not wait: exit 3 if someone is ahead")
	detach := fs.Bool("detach", false, "acquire, then exit 0 leaving the lock held for at most --ttl (or until this identity is used again)")
	pos, cmdArgs, err := interspersed(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "bqclient lock: need exactly one lock NAME")
		return exitUsage
	}
	if *detach && len(cmdArgs) > 0 {
		fmt.Fprintln(stderr, "bqclient lock: --detach and a command exclude each other")
		return exitUsage
	}
	name := pos[0]
	sigCtx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx := sigCtx
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(sigCtx, *timeout)
		defer cancel()
	}
	// One identity is one client with one session at a time (docs/protocol.md §2,
	// §5): processes of this machine that share it take turns.
	unlockIdentity, err := lockIdentity(ctx, g.identity, *try)
	if err != nil {
		return report(stderr, "lock", err)
	}
	defer unlockIdentity()
	c, err := dial(ctx, g, *ttl, stderr)
	if err != nil {
		return report(stderr, "lock", err)
	}
	m := c.Mutex(name)
	var h *bq.Holding
	if *try {
		h, err = m.TryLock(ctx)
	} else {
		h, err = m.Lock(ctx)
	}
	if err != nil {
		_ = c.Close()
		return report(stderr, "lock", err)
	}
	if *detach {
		fmt.Fprintf(stdout, "acquired %s token=%s (detached; held for at most %v)\n", name, h.Token(), *ttl)
		_ = c.Detach()
		return exitOK
	}
	defer c.Close()
	if len(cmdArgs) > 0 {
		return runUnderLock(sigCtx, h, name, cmdArgs, stderr)
	}
	fmt.Fprintf(stdout, "acquired %s token=%s\n", name, h.Token())
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, bufio.NewReader(stdin))
		close(eof)
	}()
	select {
	case <-sigCtx.Done():
	case <-eof:
	case <-h.Lost():
		fmt.Fprintf(stderr, "bqclient: lock %s lost: the lease guarantee failed\n", name)
		return exitLost
	}
	return release(h, name, stdout, stderr)
}

func release(h *bq.Holding, name string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Unlock(ctx); err != nil {
		return report(stderr, "unlock", err)
	}
	fmt.Fprintf(stdout, "released %s\n", name)
	return exitOK
}

// runUnderLock runs cmd while h is held; if the lock is lost, it sends the
// command SIGTERM and exits 4.
func runUnderLock(sigCtx context.Context, h *bq.Holding, name string, argv []string, stderr io.Writer) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "BQ_LOCK_NAME="+name, "BQ_LOCK_TOKEN="+h.Token().String())
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "bqclient: cannot run %s: %v\n", argv[0], err)
		release(h, name, io.Discard, stderr)
		return exitError
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	lost := false
	var werr error
	select {
	case werr = <-done:
	case <-h.Lost():
		lost = true
		fmt.Fprintf(stderr, "bqclient: lock %s lost while %s ran: stopping it (SIGTERM)\n", name, argv[0])
		_ = cmd.Process.Signal(syscall.SIGTERM)
		werr = <-done
	case <-sigCtx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		werr = <-done
	}
	if lost {
		return exitLost
	}
	code := exitOK
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		code = ee.ExitCode()
		if code < 0 {
			code = 128 + int(syscall.SIGTERM)
		}
	} else if werr != nil {
		code = exitError
	}
	if rc := release(h, name, io.Discard, stderr); rc != exitOK && code == exitOK {
		return rc
	}
	return code
}

func cmdUnlock(g globals, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bqclient unlock", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	pos, _, err := interspersed(fs, args)
	if err != nil || len(pos) != 1 {
		fmt.Fprintln(stderr, "bqclient unlock: need exactly one lock NAME")
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c, err := dial(ctx, g, 10*time.Second, stderr)
	if err != nil {
		return report(stderr, "unlock", err)
	}
	defer c.Close()
	released, err := c.Release(ctx, pos[0])
	if err != nil {
		return report(stderr, "unlock", err)
	}
	if released {
		fmt.Fprintf(stdout, "released %s\n", pos[0])
	} else {
		fmt.Fprintf(stdout, "%s: this identity holds nothing there\n", pos[0])
	}
	return exitOK
}

func cmdStatus(g globals, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bqclient status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	pos, _, err := interspersed(fs, args)
	if err != nil || len(pos) > 1 {
		return exitUsage
	}
	lock := ""
	if len(pos) == 1 {
		lock = pos[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	// status only observes: it uses a throwaway identity, so it never opens a
	// session of the user's identity (which would end that identity's
	// earlier sessions, a detached holding among them).
	cl, err := certs.LoadCluster(g.cluster)
	if err != nil {
		return report(stderr, "status", err)
	}
	key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	if err != nil {
		return report(stderr, "status", err)
	}
	c, err := bq.Dial(ctx, bq.Config{Cluster: cl, Identity: key})
	if err != nil {
		return report(stderr, "status", err)
	}
	defer c.Close()
	st, err := c.Status(ctx, lock)
	if err != nil {
		return report(stderr, "status", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(statusJSON(st))
		return exitOK
	}
	printStatus(stdout, st)
	return exitOK
}

// report prints err with advice and maps it to an exit code.
func report(stderr io.Writer, what string, err error) int {
	fmt.Fprintf(stderr, "bqclient %s: %v\n", what, err)
	switch {
	case errors.Is(err, bq.ErrBusy), errors.Is(err, bq.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return exitTimeout
	case errors.Is(err, bq.ErrLockLost):
		return exitLost
	case errors.Is(err, context.Canceled):
		return exitError
	}
	return exitError
}
