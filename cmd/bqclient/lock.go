package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/cmd/internal/cli"
	"github.com/bq-lock/bq/wire"
)

const (
	// tryTimeout bounds `lock --try` without --timeout: it answers busy,
	// unavailable or acquired within it, never waits for the cluster.
	tryTimeout = 3 * time.Second
	// tryDialTimeout bounds the part of it that waits for a quorum to
	// answer: a server that is down cannot be told from a slow one, but a
	// live one answers in milliseconds, so --try says "unavailable" within
	// a second (issue 55: the README's drill said "at once" and took 3 s).
	tryDialTimeout = time.Second
	// quitBudget is what a command that must end (a timeout, a signal, a
	// failure) gives the servers to hear its Exit before it leaves; what
	// they miss they clear when the session's lease runs out.
	quitBudget = 300 * time.Millisecond
	// releaseBudget bounds the release of a holding at its end.
	releaseBudget = 5 * time.Second
)

type lockOpts struct {
	timeout, ttl time.Duration
	ttlSet       bool // --ttl was given (else a TTL that fits the max-hold may be chosen)
	try, detach  bool
	shared       bool // --shared: a reader of a readers–writer lock
	permits      int  // --permits K: one of K permits (0: not a semaphore)
}

// mode is the holding o asks for, as the SDK names it.
func (o lockOpts) mode() bq.Mode {
	switch {
	case o.shared:
		return bq.Mode{Mode: wire.ModeShared}
	case o.permits > 0:
		return bq.Mode{Mode: wire.ModePermits, Permits: uint32(o.permits)}
	}
	return bq.Mode{}
}

func lockCmd(g *globals, std stdio) *cobra.Command {
	var o lockOpts
	cmd := &cobra.Command{
		Use:   "lock NAME [flags] [-- CMD [ARGS...]]",
		Short: "Take a lock; with CMD, run it while holding the lock",
		Long: `Take the lock NAME, first come first served, and then:
  - with -- CMD: run CMD while holding it, with BQ_LOCK_NAME, BQ_LOCK_TOKEN (the fencing token,
    N.T) and BQ_LOCK_TOKEN_INT (the same token as one integer) in its environment; release the
    lock when CMD ends and exit with CMD's code. If the lock is about to be lost meanwhile, CMD's
    process group gets SIGTERM a tenth of --ttl before the lease lapses (SIGKILL half of that
    later: CMD is dead before another client can enter) and bqclient exits 4. On Linux CMD also
    dies if bqclient itself is killed (even with kill -9).
  - with --detach: exit at once, leaving the lock held for at most --ttl.
  - else: print "acquired NAME token=N.T" and hold until Ctrl-C, SIGTERM or the end of stdin.

A max-hold (the longest the operator lets this identity hold a lock) stops CMD early, so that it is
dead and the lock released before the servers cut the holding: CMD gets SIGTERM at
    max-hold - (TTL/10 + G + max-hold/20)   after the lock is taken (TTL: --ttl),
SIGKILL G/2 later, and bqclient exits 4. TTL/10 allows for the clocks of client and servers to run
apart; G, the loss grace (TTL/10, 100ms to 2s), is the time to stop CMD before the release lets
anyone in; max-hold/20 is the time for the release to reach the servers. A max-hold of 3s with
--ttl 2s stops CMD at 3 - (0.2 + 0.2 + 0.15) = 2.45s. Without --ttl, bqclient takes the longest TTL
whose margin leaves half the max-hold, and says so: for 3s, 6.75s, and CMD stops at 1.5s. A shorter
--ttl leaves CMD more of a short max-hold; one that leaves less than half is refused (exit 6).

Fencing tokens grow strictly from each holder to the next: compare N as numbers and, for equal N,
T as strings (16 hex digits); or compare BQ_LOCK_TOKEN_INT as integers. Have the resource refuse a
token lower than the highest it has seen.

Shared holdings (BQ_LOCK_MODE says which: exclusive, shared, or "K permits"):
  - --shared takes NAME as a reader: readers hold it together, a writer (a plain lock NAME) alone.
    First come first served in both modes, so readers never starve a writer. A writer's token
    exceeds every token granted before it: have the resource accept a write whose token is at
    least the highest it has seen, and a read whose token is at least the highest of a write.
  - --permits K takes one of K permits (2 to 1024): at most K holders at once. Every user of NAME
    must give the same K: holders of another K exclude each other, as writers do, so a lock that
    waits behind another K (or --shared against --permits) says so once on stderr, and --try names
    it: 'lock "pool" is busy: held as 2 permits by ...; you asked for 3 permits: a semaphore's
    holders must all give the same count'. Its tokens order the holders but fence nothing (K
    holders are in together).
Exit codes, signals, --ttl and the loss of the lock are the same in every mode.`,
		Example: `  bqclient lock deploy -- ./deploy.sh
  bqclient lock deploy --try -- ./deploy.sh          # exit 3 at once if someone is ahead
  bqclient lock deploy --timeout 30s                 # hold until Ctrl-C or end of stdin
  bqclient lock deploy --detach --ttl 5m             # held for at most 5 minutes, no process
  bqclient lock config --shared -- ./read-config.sh  # with other readers, never with a writer
  bqclient lock gpus --permits 4 -- ./train.sh       # at most 4 of these at once`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			name, argv, err := lockArgs(cmd, args)
			if err != nil {
				return err
			}
			if err := wire.CheckLockName(name); err != nil {
				return cli.Usagef("bad lock name %q: %v", name, err)
			}
			if o.ttl < 100*time.Millisecond {
				return cli.Usagef("--ttl %v is below the minimum 100ms", o.ttl)
			}
			if o.detach && len(argv) > 0 {
				return cli.Usagef("--detach and a command exclude each other")
			}
			if o.timeout < 0 {
				return cli.Usagef("--timeout %v is negative", o.timeout)
			}
			if o.shared && cmd.Flags().Changed("permits") {
				return cli.Usagef("--shared and --permits exclude each other")
			}
			if cmd.Flags().Changed("permits") && (o.permits < 2 || o.permits > wire.MaxPermits) {
				return cli.Usagef("--permits %d: want 2 to %d (one permit is a plain lock)", o.permits, wire.MaxPermits)
			}
			if o.try && !cmd.Flags().Changed("timeout") {
				o.timeout = tryTimeout
			}
			o.ttlSet = cmd.Flags().Changed("ttl")
			if err := refuseName(g, name); err != nil {
				return err
			}
			return fail(runLock(g, std, name, argv, o))
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.timeout, "timeout", 0, "give up after this long: exit 3 if someone held the lock, 5 if the cluster did not answer (0: wait for ever; --try: 3s)")
	f.DurationVar(&o.ttl, "ttl", 10*time.Second, "session lease: a holder that goes silent loses the lock within about this long")
	f.BoolVar(&o.try, "try", false, "do not wait for the lock: exit 3 at once if someone is ahead")
	f.BoolVar(&o.detach, "detach", false, "acquire, then exit 0 leaving the lock held for at most --ttl")
	f.BoolVar(&o.shared, "shared", false, "take the lock as a reader: with other readers, never with a writer")
	f.IntVar(&o.permits, "permits", 0, "take one of this many permits (2 to 1024): at most that many holders at once")
	return cmd
}

// lockArgs splits "NAME [-- CMD ARGS...]".
func lockArgs(cmd *cobra.Command, args []string) (string, []string, error) {
	dash := cmd.ArgsLenAtDash()
	switch {
	case dash < 0 && len(args) == 1:
		return args[0], nil, nil
	case dash < 0 && len(args) > 1:
		return "", nil, cli.Usagef("unexpected argument %q: put the command to run after --", args[1])
	case dash == 1 && len(args) > 1:
		return args[0], args[1:], nil
	case dash == 1:
		return "", nil, cli.Usagef("nothing to run after --")
	}
	return "", nil, cli.Usagef("need exactly one lock NAME")
}

// signals cancels the returned context with the first SIGINT, SIGTERM or
// SIGHUP; later ones go to the channel (a running CMD gets them).
func signals() (context.Context, <-chan os.Signal, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 4)
	later := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-ch:
				cancel(signalled{sig: s.(syscall.Signal)})
				select {
				case later <- s:
				default:
				}
			case <-done:
				return
			}
		}
	}()
	return ctx, later, func() { signal.Stop(ch); close(done); cancel(nil) }
}

func runLock(g *globals, std stdio, name string, argv []string, o lockOpts) error {
	sigCtx, sigs, stop := signals()
	defer stop()
	ctx := sigCtx
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(sigCtx, o.timeout)
		defer cancel()
	}
	// One identity is one client with one session at a time (docs/protocol.md
	// §2, §5): processes of this machine that share it take turns.
	unlockIdentity, err := lockIdentity(ctx, g.identity, o.try, std.err)
	if err != nil {
		return err
	}
	defer unlockIdentity()
	dialCtx := ctx
	if o.try && o.timeout == tryTimeout {
		var cancel context.CancelFunc
		dialCtx, cancel = context.WithTimeout(ctx, tryDialTimeout)
		defer cancel()
	}
	c, err := dialSaying(dialCtx, g, &o, std.err)
	if err != nil {
		return timedOut(err, o.timeout)
	}
	quit := func() { leave(c) }
	lock, tryLock := c.Mutex(name).Lock, c.Mutex(name).TryLock
	switch {
	case o.shared:
		rw := c.RWMutex(name)
		lock, tryLock = rw.RLock, rw.TryRLock
	case o.permits > 0:
		s := c.Semaphore(name, o.permits)
		lock, tryLock = s.Acquire, s.TryAcquire
	}
	var h *bq.Holding
	if o.try {
		h, err = tryLock(ctx)
	} else {
		said := sayClash(c, name, std.err)
		h, err = lock(ctx)
		said()
	}
	if err != nil {
		quit()
		return timedOut(err, o.timeout)
	}
	if o.detach {
		fmt.Fprintf(std.out, "acquired %s token=%s%s (detached: held for at most %v)\n", name, h.Token(), modeNote(h), o.ttl)
		return c.Detach()
	}
	if len(argv) > 0 {
		code, err := runUnderLock(h, name, argv, o.ttl, sigs, std.err)
		if err != nil {
			quit()
			return err
		}
		if rerr := release(c, h); rerr != nil && code == exitOK {
			return rerr
		}
		if code != exitOK {
			return &failure{Code: code}
		}
		return nil
	}
	fmt.Fprintf(std.out, "acquired %s token=%s%s\n", name, h.Token(), modeNote(h))
	if lost := holdUntil(sigCtx, std.in, h); lost {
		quit()
		return &failure{Code: exitLost, Msg: fmt.Sprintf("lock %s lost: %s", name, lostReason(h))}
	}
	if err := release(c, h); err != nil {
		return err
	}
	fmt.Fprintf(std.out, "released %s\n", name)
	return nil
}

// sayClash says once on stderr, while a Lock of name waits, that it waits
// for holders whose mode excludes its own although both share among their
// own kind (another --permits count, --shared against --permits): often a
// typo in a count, which would otherwise wait silently for as long as they
// hold (issue 55). The returned func stops it, once the Lock returned.
func sayClash(c *bq.Client, name string, stderr io.Writer) func() {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if what, clash := c.Waiting(name); clash {
				fmt.Fprintf(stderr, "bqclient: waiting for %q: %s\n", name, what)
				return
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// modeNote is " (shared)" or " (one of K permits)" for a holding that is
// not exclusive, "" for one that is.
func modeNote(h *bq.Holding) string {
	switch m := h.Mode(); m.Mode {
	case wire.ModeShared:
		return " (shared)"
	case wire.ModePermits:
		return fmt.Sprintf(" (one of %d permits)", m.Permits)
	}
	return ""
}

// lostReason says why h was lost, in a few words.
func lostReason(h held) string {
	if err := h.Err(); err != nil {
		return strings.TrimPrefix(strings.TrimPrefix(err.Error(), "bq: "), "lock lost: ")
	}
	return "the lease guarantee failed"
}

// holdUntil waits for the first signal (sigCtx), the end of in, or the loss
// of h, and reports whether it was the loss.
func holdUntil(sigCtx context.Context, in io.Reader, h held) bool {
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, bufio.NewReader(in))
		close(eof)
	}()
	select {
	case <-sigCtx.Done():
	case <-eof:
	case <-h.Lost():
		return true
	}
	return false
}

// held is a holding or a lead: what a CMD runs under.
type held interface {
	Lost() <-chan struct{}
	Err() error
}

// leave ends c's session and disconnects within quitBudget.
func leave(c *bq.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), quitBudget)
	defer cancel()
	_ = c.Shutdown(ctx)
}

// timedOut words a timeout with the user's --timeout: the command as a
// whole waited that long (the SDK counts only its own call).
func timedOut(err error, timeout time.Duration) error {
	var e *bq.Error
	if timeout <= 0 || !errors.Is(err, bq.ErrTimeout) || !errors.As(err, &e) || e.WaitingFor() == "" {
		return err
	}
	f := fail(err).(*failure)
	f.Msg = fmt.Sprintf("timed out after %v waiting for %s", timeout, e.WaitingFor())
	return f
}

// release unlocks h and closes c, within releaseBudget.
func release(c *bq.Client, h *bq.Holding) error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseBudget)
	defer cancel()
	err := h.Unlock(ctx)
	leave(c)
	if err != nil {
		return fmt.Errorf("releasing %s: %w", h.Name(), err)
	}
	return nil
}

// runUnderLock runs argv while h is held and returns its exit code: 128+N if
// a signal N ended it, exitLost if the lock was lost while it ran. Signals
// bqclient gets meanwhile go to CMD.
func runUnderLock(h *bq.Holding, name string, argv []string, ttl time.Duration, sigs <-chan os.Signal, stderr io.Writer) (int, error) {
	env := append(os.Environ(), "BQ_LOCK_NAME="+name, "BQ_LOCK_TOKEN="+h.Token().String(), "BQ_LOCK_TOKEN_INT="+h.Token().Integer(),
		"BQ_LOCK_MODE="+h.Mode().String())
	return runWhileHeld(h, "lock", "lock "+name+" lost", env, argv, ttl, sigs, stderr)
}

// runWhileHeld runs argv with env while h lasts (see runUnderLock); cmd
// and lost word the line bqclient prints when h is lost.
func runWhileHeld(h held, cmd, lost string, env, argv []string, ttl time.Duration, sigs <-chan os.Signal, stderr io.Writer) (int, error) {
	ch, err := startChild(argv, env, killAfter(ttl))
	if err != nil {
		return 0, fmt.Errorf("cannot run %s: %w", argv[0], err)
	}
	for {
		select {
		case <-ch.done:
			return ch.exitCode(), nil
		case <-h.Lost():
			fmt.Fprintf(stderr, "bqclient %s: %s while %s ran (%s): stopping it (SIGTERM)\n", cmd, lost, argv[0], lostReason(h))
			ch.signal(syscall.SIGTERM)
			<-ch.done
			return exitLost, nil
		case s := <-sigs:
			ch.signal(s.(syscall.Signal))
		}
	}
}

// dialSaying dials as dial does; if no quorum answers within tryTimeout
// and the command may wait longer, it says on stderr, once, what it waits
// for, and waits on (issue 44: a lock must not wait silently for a cluster
// that is down).
func dialSaying(ctx context.Context, g *globals, o *lockOpts, stderr io.Writer) (*bq.Client, error) {
	if o.try || (o.timeout > 0 && o.timeout <= tryTimeout) {
		return dial(ctx, g, &o.ttl, o.ttlSet, stderr)
	}
	first, cancel := context.WithTimeout(ctx, tryTimeout)
	c, err := dial(first, g, &o.ttl, o.ttlSet, stderr)
	cancel()
	var e *bq.Error
	if err == nil || ctx.Err() != nil || !errors.Is(err, bq.ErrUnavailable) || !errors.As(err, &e) || e.WaitingFor() == "" {
		return c, err
	}
	until := "for ever (--timeout bounds it)"
	if o.timeout > 0 {
		until = fmt.Sprintf("up to --timeout %v", o.timeout)
	}
	fmt.Fprintf(stderr, "bqclient: waiting %s for %s\n", until, e.WaitingFor())
	return dial(ctx, g, &o.ttl, o.ttlSet, stderr)
}

// dial connects with the global flags; it creates the identity on first use
// and says so.
// *ttl is the lease; unless set says the user chose it, a shorter one is
// chosen (and *ttl changed) when the identity's max-hold leaves it no room.
// A nil ttl is a client that takes nothing (unlock): the default lease, no
// max-hold check.
func dial(ctx context.Context, g *globals, ttl *time.Duration, set bool, stderr io.Writer) (*bq.Client, error) {
	takes := ttl != nil
	if !takes {
		d := 10 * time.Second
		ttl = &d
	}
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
	c, err := bq.Dial(ctx, bq.Config{ClusterFile: g.cluster, IdentityFile: g.identity, TTL: *ttl, LossGrace: lossGrace(*ttl), ExitLostOnUnlock: true})
	if err != nil {
		return nil, err
	}
	g.dialed = c
	mh := c.MaxHold()
	err = holdFits(mh, *ttl)
	if err == nil || !takes {
		return c, nil
	}
	leave(c)
	fit := fitTTL(mh, *ttl)
	if set || fit == 0 {
		return nil, err
	}
	// The default TTL does not fit this identity's max-hold: take one that does.
	fmt.Fprintln(stderr, fitNote(mh, fit))
	*ttl = fit
	if c, err = bq.Dial(ctx, bq.Config{ClusterFile: g.cluster, IdentityFile: g.identity, TTL: fit, LossGrace: lossGrace(fit), ExitLostOnUnlock: true}); err == nil {
		g.dialed = c
	}
	return c, err
}

// fitNote says that bqclient took lease TTL fit for max-hold mh, and when
// a holding is given up then (issue 55: a CMD stopped at 1.67 s of a 3 s
// max-hold surprised its user).
func fitNote(mh, fit time.Duration) string {
	return fmt.Sprintf("bqclient: this identity may hold a lock for at most %v (its max-hold): taking a lease TTL of %v, which fits it; "+
		"a holding is given up %v after it is taken (CMD gets SIGTERM then; 'bqclient lock --help' says why), and --ttl chooses another",
		mh, fit, givenUpAfter(mh, fit))
}

// givenUpAfter is how long after it is taken a holding of lease TTL t is
// given up under max-hold mh: mh less its margin (holdMargin).
func givenUpAfter(mh, t time.Duration) time.Duration { return mh - holdMargin(mh, t) }

// fitTTL is the longest TTL up to ttl, in steps of 50 ms, whose margin
// leaves half of max-hold mh (holdFits), or zero if none does.
func fitTTL(mh, ttl time.Duration) time.Duration {
	fit := time.Duration(0)
	for t := 100 * time.Millisecond; t <= ttl; t += 50 * time.Millisecond {
		if holdMargin(mh, t) <= mh/2 {
			fit = t
		}
	}
	return fit
}

// holdMargin is how long before max-hold mh a holding with lease TTL t is
// given up: the lease margin ε·t (the clocks of client and servers may
// drift apart), the loss grace (the time to stop CMD: SIGTERM, SIGKILL half
// of it later, reaped before the release goes out) and mh/20 (the time for
// the release to reach the servers before their own cut). Changes 24, 34,
// 39 and 41 of docs/protocol.md.
func holdMargin(mh, t time.Duration) time.Duration { return t/10 + lossGrace(t) + mh/20 }

// holdFits refuses, before anything is taken, a --ttl whose margin would eat
// more than half of the identity's max-hold: the holding would be given up
// almost as soon as it began (docs/protocol.md change 24). The SDK refuses
// such a Lock too; bqclient says which --ttl fits, knowing its grace.
func holdFits(mh, ttl time.Duration) error {
	if mh <= 0 || holdMargin(mh, ttl) <= mh/2 {
		return nil
	}
	fit := fitTTL(mh, ttl)
	advice := fmt.Sprintf("use --ttl %v or less", fit)
	if fit == 0 {
		advice = "no --ttl fits"
	}
	return &failure{Code: exitRefused, Msg: fmt.Sprintf(
		"the servers let this identity hold a lock for at most %v (its max-hold); with --ttl %v a holding would be given up %v before that (the lease margin and the time to stop CMD), more than half of it: %s, or ask the operator for a longer max-hold",
		mh, ttl, holdMargin(mh, ttl), advice)}
}

// lossGrace is how long before the lease guarantee lapses bqclient hears
// that a lock is lost (docs/protocol.md change 34): TTL/10, at least 100 ms,
// at most 2 s and TTL/3. CMD gets SIGTERM then, SIGKILL killAfter later,
// and is reaped with the rest of the grace and the servers' ε·TTL to spare,
// so it never runs once a correct server may let the next client in.
func lossGrace(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 100*time.Millisecond), 2*time.Second, ttl/3)
}

// killAfter is how long CMD has between SIGTERM and SIGKILL: half the grace.
func killAfter(ttl time.Duration) time.Duration { return lossGrace(ttl) / 2 }
