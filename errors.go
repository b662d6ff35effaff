package bq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// Errors returned by the client. Test with errors.Is.
var (
	// ErrBusy: TryLock found someone ahead.
	ErrBusy = errors.New("bq: lock is busy")
	// ErrLockLost: the holding ended because the lease guarantee failed,
	// or at its max-hold (ErrMaxHold).
	ErrLockLost = errors.New("bq: lock lost (lease guarantee failed)")
	// ErrMaxHold: the holding ended because it was held for the max-hold
	// the servers apply to this identity (its certificate's, or the
	// cluster's default; docs/protocol.md change 24). The client gives the
	// lock up a margin before the servers would. Such an error is also an
	// ErrLockLost.
	ErrMaxHold = errors.New("bq: lock held for its maximum hold time")
	// ErrTimeout: the context's deadline passed before the operation
	// completed. The message says what it waited for.
	ErrTimeout = errors.New("bq: timed out")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("bq: client closed")
	// ErrNotHeld: Unlock of a lock this client does not hold.
	ErrNotHeld = errors.New("bq: lock not held")
	// ErrUnavailable: too few servers answer to form a quorum (down,
	// unreachable, or a wrong cluster file).
	ErrUnavailable = errors.New("bq: cluster unavailable")
	// ErrRefused: the servers refused the request for what it asks (a lease
	// TTL out of their bounds, a limit of this identity, a ban), so many of
	// them that it cannot succeed; the message has their reasons. Retrying
	// the same request does not help. A faulty server alone cannot cause it.
	ErrRefused = errors.New("bq: refused by the servers")
	// ErrNotPermitted: a closed cluster does not let this identity do
	// what it asked: it is not enrolled, its certificate expired, it was
	// revoked, or the lock name is outside its patterns (docs/protocol.md
	// change 23). Such an error is also an ErrRefused.
	ErrNotPermitted = errors.New("bq: not permitted")
	// ErrIdentityInUse: another process of this machine has the identity
	// open, or another Client of this process (the message says which). One
	// identity is one client with one session at a time: give each process
	// its own identity file, and share one Client within a process (it is
	// safe for concurrent use).
	ErrIdentityInUse = errors.New("bq: identity in use")
)

func mapBakeryErr(err error) error {
	var r *bakery.Refusal
	switch {
	case errors.As(err, &r):
		return refusalError(r)
	case errors.Is(err, bakery.ErrBusy):
		return ErrBusy
	case errors.Is(err, bakery.ErrMaxHold):
		return &Error{msg: "bq: lock lost: " + strings.TrimPrefix(err.Error(), "bakery: "), kinds: []error{ErrLockLost, ErrMaxHold}, cause: err}
	case errors.Is(err, bakery.ErrLeaseLost):
		return &Error{msg: "bq: " + strings.TrimPrefix(err.Error(), "bakery: "), kinds: []error{ErrLockLost}, cause: err}
	case errors.Is(err, bakery.ErrNotPermitted):
		return &Error{msg: "bq: " + strings.TrimPrefix(err.Error(), "bakery: "), kinds: []error{ErrNotPermitted, ErrRefused}, cause: err}
	case errors.Is(err, bakery.ErrRefused):
		return &Error{msg: "bq: " + strings.TrimPrefix(err.Error(), "bakery: "), kinds: []error{ErrRefused}, cause: err}
	}
	return err
}

// refusalError words what so many servers refused that fewer than a quorum
// are left to accept it (bakery.Refusal) as a user reads it: how many of
// the servers refused what, how many it needs, and their reasons in their
// own words, each once (with the servers that gave it when they differ),
// without the internal prefixes of bq's packages.
//
//	not permitted: 2 of the 4 servers refused lock "prod/deploy", leaving fewer than the 3 it needs: "ci" may not use lock "prod/deploy": its certificate allows ci/*
func refusalError(r *bakery.Refusal) error {
	kinds, lead := []error{ErrRefused}, "bq: "
	if errors.Is(r.Kind, bakery.ErrNotPermitted) {
		kinds, lead = []error{ErrNotPermitted, ErrRefused}, "bq: not permitted: "
	}
	subject := fmt.Sprintf("lock %q", r.Lock)
	switch r.What {
	case "the session":
		subject = "this client's session"
	case "the connection":
		subject = "this client's connection"
	case "the Listen":
		subject = fmt.Sprintf("to listen for lock %q", r.Lock)
	case "the value":
		subject = fmt.Sprintf("the value of election %q", r.Lock)
	}
	reasons := r.Reasons()
	parts := make([]string, len(reasons))
	for i, why := range reasons {
		parts[i] = plainWords(why.Text)
		if len(reasons) > 1 && !(len(why.Servers) == 1 && strings.HasPrefix(parts[i], why.Servers[0].String()+" ")) {
			ids := make([]string, len(why.Servers))
			for j, s := range why.Servers {
				ids[j] = s.String()
			}
			parts[i] += " (" + strings.Join(ids, ", ") + ")"
		}
	}
	msg := fmt.Sprintf("%s%d of the %d servers refused %s, leaving fewer than the %d it needs: %s",
		lead, len(r.By), r.N, subject, r.Q, strings.Join(parts, "; "))
	return &Error{msg: msg, kinds: kinds, cause: r}
}

// internalPrefix is the prefix a package of bq gives its errors ("core: ",
// "bakery: "), at the start of a server's words or of a part of them.
var internalPrefix = regexp.MustCompile(`(^|: |; |\()(?:activeset|bakery|certs|core|crypto|detector|omega|quorum|server|store|transport|wire): `)

// plainWords is a server's words without the internal prefixes of bq's
// packages, which say nothing to a user.
func plainWords(s string) string {
	for {
		t := internalPrefix.ReplaceAllString(s, "$1")
		if t == s {
			return s
		}
		s = t
	}
}

// Error is an error of this package with one line of text that says what
// happened, and the sentinels it is (ErrTimeout, ErrUnavailable, ...) and
// its cause (a context's error) for errors.Is.
type Error struct {
	msg   string
	kinds []error
	cause error
	what  string // what it waited for, when its context ended
}

func (e *Error) Error() string { return e.msg }

// WaitingFor says what the operation waited for when its context ended (the
// lock and its holder, or how many servers answered), or "" for an error
// that is not a timeout or a cancellation.
func (e *Error) WaitingFor() string { return e.what }

// Unwrap returns the sentinels the error is, and its cause.
func (e *Error) Unwrap() []error {
	out := append([]error(nil), e.kinds...)
	if e.cause != nil {
		out = append(out, e.cause)
	}
	return out
}

// gaveUp is the error of an operation whose context ended after waited, while
// it waited for what: with the deadline passed it is an ErrTimeout (and an
// ErrUnavailable if it waited for the servers), else the context's error.
func gaveUp(ctx context.Context, waited time.Duration, what string, unavailable bool) error {
	cause := context.Cause(ctx)
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &Error{msg: fmt.Sprintf("bq: gave up after %v waiting for %s: %v", round(waited), what, cause), cause: cause, what: what}
	}
	kinds := []error{ErrTimeout}
	if unavailable {
		kinds = append(kinds, ErrUnavailable)
	}
	return &Error{msg: fmt.Sprintf("bq: timed out after %v waiting for %s", round(waited), what), kinds: kinds, cause: cause, what: what}
}

// round rounds a wait for a message: 2s, 1.5s, 300ms.
func round(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(10 * time.Millisecond)
}

// describeWait says what an attempt on lock in mode waits for: the
// servers' answers or the members ahead (the holder first, with the mode it
// holds in), and whether it is the servers. A member ahead whose mode
// excludes mode although both share among their own kind (another
// semaphore count, readers against a semaphore's holders) is named with a
// hint (clashHint): often a mistake in a count, which waits for as long as
// they hold.
func describeWait(lock string, mode Mode, w bakery.Wait, n int) (string, bool) {
	what, servers := waitWords(mode, w, n)
	if what == "" {
		return fmt.Sprintf("%q", lock), servers
	}
	return fmt.Sprintf("%q: %s", lock, what), servers
}

// waitWords is describeWait without the lock's name ("" when there is
// nothing to say but the name).
func waitWords(mode Mode, w bakery.Wait, n int) (string, bool) {
	if w.Phase == "" {
		return "", false
	}
	if w.ServersShort() {
		what := map[string]string{"get-ticket": "GET-TICKET", "set-ticket": "SET-TICKET", "listen": "LISTEN", "exit": "EXIT"}[w.Phase]
		return fmt.Sprintf("%d of %d servers answered its %s, need %d", w.Answered, n, what, w.Need), true
	}
	if len(w.Ahead) == 0 {
		return "", false
	}
	var holders, others []bakery.Ahead
	for _, a := range w.Ahead {
		if a.Statement != nil && a.Statement.Phase == wire.PhaseHeld {
			holders = append(holders, a)
		} else {
			others = append(others, a)
		}
	}
	tokenOf := func(a bakery.Ahead) Token { return Token{N: a.Statement.N, Client: a.Client} }
	var b strings.Builder
	if len(holders) > 0 {
		first := holders[0]
		for _, h := range holders[1:] {
			if tokenOf(h).Less(tokenOf(first)) {
				first = h
			}
		}
		fmt.Fprintf(&b, "held %sby %s (token %s)", heldAs(wire.HoldingOf(first.Statement)), first.Client.Hex()[:16], tokenOf(first))
		if len(holders) > 1 {
			fmt.Fprintf(&b, " and %d more holders", len(holders)-1)
		}
		if len(others) > 0 {
			fmt.Fprintf(&b, ", %d more ahead", len(others))
		}
	} else {
		first := others[0]
		switch {
		case first.Statement == nil:
			fmt.Fprintf(&b, "%s ahead", first.Client.Hex()[:16])
		case first.Statement.N == 0:
			fmt.Fprintf(&b, "%s ahead (taking a ticket%s)", first.Client.Hex()[:16], modeWords(wire.HoldingOf(first.Statement)))
		default:
			fmt.Fprintf(&b, "%s ahead (ticket %d%s)", first.Client.Hex()[:16], first.Statement.N, modeWords(wire.HoldingOf(first.Statement)))
		}
		if len(others) > 1 {
			fmt.Fprintf(&b, ", %d more ahead", len(others)-1)
		}
	}
	for _, a := range w.Ahead {
		if a.Statement == nil {
			continue
		}
		if hint := clashHint(mode, wire.HoldingOf(a.Statement)); hint != "" {
			b.WriteString("; " + hint)
			break
		}
	}
	return b.String(), false
}

// heldAs is how a holding in mode h reads after "held ": "" for exclusive,
// "shared ", "as 3 permits ".
func heldAs(h Mode) string {
	switch h.Mode {
	case wire.ModeShared:
		return "shared "
	case wire.ModePermits:
		return fmt.Sprintf("as %d permits ", h.Permits)
	}
	return ""
}

// modeWords is ", shared" or ", 3 permits" for a waiter that is not
// exclusive, "" for one that is.
func modeWords(h Mode) string {
	if h.Mode == wire.ModeExclusive {
		return ""
	}
	return ", " + h.String()
}

// clashHint says why asked waits for a member in mode other when the two
// exclude each other although asked shares the lock with its own kind
// (docs/protocol.md change 60): another semaphore count, readers against a
// semaphore's holders, a plain lock against a semaphore. Such a wait is
// often a mistake in a count, and lasts for as long as the other holds. ""
// when there is nothing to say: they are compatible, or asked is exclusive
// (it waits for everyone), or a reader waits for a writer (what readers do).
func clashHint(asked, other Mode) string {
	if asked.Compatible(other) {
		return ""
	}
	switch {
	case asked.Mode == wire.ModePermits && other.Mode == wire.ModePermits:
		return fmt.Sprintf("you asked for %d permits: a semaphore's holders must all give the same count", asked.Permits)
	case asked.Mode == wire.ModePermits && other.Mode == wire.ModeShared:
		return fmt.Sprintf("you asked for one of %d permits: a semaphore's holders and readers (shared) exclude each other", asked.Permits)
	case asked.Mode == wire.ModePermits && other.Mode == wire.ModeExclusive:
		return fmt.Sprintf("you asked for one of %d permits: an exclusive holder (a plain lock of the name) excludes everyone", asked.Permits)
	case asked.Mode == wire.ModeShared && other.Mode == wire.ModePermits:
		return fmt.Sprintf("you asked to share it as a reader: readers and a semaphore's holders (%d permits) exclude each other", other.Permits)
	}
	return ""
}

// checkAdmission fails at once, with what to do, when a closed cluster
// would refuse the identity anyway: no admission certificate, one of
// another key or cluster, or one out of its validity (docs/protocol.md
// change 23). A certificate of this key and cluster that no client CA the
// client knows of signed may be of a client CA the cluster listed since
// (a rotation the client's epochs do not show yet): the servers decide, and
// note says so, for their refusal if they refuse (issue 44).
// The certificate's body comes back too (nil on an open cluster), for the
// lock names it allows (mayUse).
func checkAdmission(c *certs.Cluster, clientCAs []*crypto.Parsed, key *crypto.PrivateKey, admission *crypto.Signed, file string, epoch uint64, clusterFile string) (grant *wire.AdmissionBody, note string, _ error) {
	if !c.Closed() {
		return nil, "", nil
	}
	where := "this identity"
	if file != "" {
		where = file
	}
	refuse := func(format string, args ...any) error {
		return &Error{msg: "bq: " + fmt.Sprintf(format, args...), kinds: []error{ErrNotPermitted, ErrRefused}}
	}
	if admission == nil {
		pub := "KEY" + certs.PublicKeySuffix
		if file != "" {
			pub = file + certs.PublicKeySuffix
		}
		return nil, "", refuse("cluster %q is closed and %s has no admission certificate: ask its operator to enroll client id %s (bqserver client add NAME --pub %s), then append the certificate to %s",
			c.Name, where, wire.ClientID(key.Public.ID).Hex()[:16], pub, where)
	}
	b, err := wire.VerifyAdmissionAny(clientCAs, c.ID(), *admission)
	if err != nil {
		var u wire.AdmissionBody
		if crypto.UnmarshalCanonical(admission.Body, &u) != nil || u.Cluster != c.ID() {
			return nil, "", refuse("the admission certificate in %s is not valid for cluster %q: %v", where, c.Name, err)
		}
		// Unverified, only to word what the servers will decide.
		b = &u
		files := "the cluster given to this client"
		if clusterFile != "" {
			files = clusterFile + " and the epochs beside it"
		}
		note = fmt.Sprintf("the admission certificate in %s is signed by a client CA that %s (epoch %d) do not list: if the cluster rotated its client CA since, they are out of date: copy epochs/ from the cluster directory beside %s",
			where, files, epoch, cmp.Or(clusterFile, "the cluster file"))
	}
	if b.Client != wire.ClientID(key.Public.ID) {
		return nil, "", refuse("the admission certificate in %s (%q) is for another key, client id %s, not this one (%s)",
			where, b.Name, b.Client.Hex(), wire.ClientID(key.Public.ID).Hex())
	}
	if err := b.ValidAt(time.Now()); err != nil {
		return nil, "", refuse("%v: ask the cluster's operator for a new one (bqserver client renew %s)", err, b.Name)
	}
	return b, note, nil
}

// mayUse refuses at once, before any server is asked, a lock name outside
// the patterns of the identity's admission certificate (docs/protocol.md
// change 23): every correct server would refuse it, and the certificate
// the client shows them is its own. The servers stay the authority: a name
// the certificate allows is theirs to refuse still. A certificate renewed
// in the identity file since Dial (renewedAdmission) that allows the name
// lets it through, for the servers to decide on the connections that show
// the new one.
func (c *Client) mayUse(lock string) error {
	g := c.grant
	if g == nil || g.Allows(lock) {
		return nil
	}
	if c.renewed != nil {
		if s := c.renewed(); s != nil {
			var b wire.AdmissionBody
			if crypto.UnmarshalCanonical(s.Body, &b) == nil && b.Allows(lock) {
				return nil
			}
		}
	}
	return &Error{msg: "bq: not permitted: " + g.Refusal(lock), kinds: []error{ErrNotPermitted, ErrRefused}}
}

// MayUse reports, without asking any server, whether the identity's
// admission certificate lets it use the lock called name: nil on an open
// cluster, or for a name one of its patterns matches; an ErrNotPermitted
// that names the patterns otherwise (what Lock, TryLock, Release, Status
// and Leader return at once for such a name). The servers decide in the
// end: nil is no promise that they admit the name.
func (c *Client) MayUse(name string) error { return c.mayUse(name) }
