package main

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/cmd/internal/cli"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server"
	"github.com/bq-lock/bq/server/metrics"
	"github.com/bq-lock/bq/transport"
	"github.com/bq-lock/bq/wire"
)

// The operator's commands for the cluster's members (issue 28, docs/protocol.md
// change 43): list them, and add, remove and replace them (reconfig.go).

func serverCmd(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "server",
		Short: "List, add, remove and replace the cluster's servers",
		Long: `The cluster's members: the servers of its newest epoch (DIR/cluster.yaml is epoch 0; each change
writes the next, signed by the cluster CA, to DIR/epochs/). 'list' shows each with its address,
whether it answers, and when its TLS certificate expires, and when the cluster CA does. 'add',
'remove' and 'replace' change the members while the cluster runs: each signs the next epoch with
DIR's CA key and pushes it to the running servers, which hand the state to the new members.`,
	}
	cmd.AddCommand(serverListCmd(stdout), serverAddCmd(stdout), serverRemoveCmd(stdout), serverReplaceCmd(stdout), serverPushCmd(stdout))
	return cli.Group(cmd)
}

func serverListCmd(stdout io.Writer) *cobra.Command {
	var dir string
	var asJSON bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "list --dir DIR [--json] [--timeout DUR]",
		Short: "List the servers, whether each answers, and every certificate's expiry",
		Long: `List the cluster in DIR, the operator's dashboard: its newest epoch E (0 is the one 'bqserver
init' made), n, f and the quorum q; for each member its id, address, state, what it says of the
epochs, which cluster CA issued its TLS certificate and when that expires; then when the cluster
CA does, and a one-line verdict. The members of the epoch before that E left out are listed too,
as long as E is the newest: they seal and hand their state over.

STATE is "reachable" (it answered as this cluster's server within --timeout), "unreachable",
"refused" (it answered and refused this command's connection; the text says why), or "corrupt"
(unreachable, and DIR/server-I/CORRUPT says its store was found corrupt and it stopped: replace it). EPOCH is what
the server says: "serving E"; "copying into E" (it knows E and copies its state before serving
it); "behind" (it does not know E: 'bqserver server push --dir DIR' shows it); "ahead" (it knows
an epoch after E: DIR is out of date); for a leaving member "sealed", with whether it may be
stopped now (once q members serve E) or must keep running. ISSUED BY names the cluster CA; after
'bqserver ca rotate' a member whose issuer was retired is marked: replace it.

A certificate that expires within 30 days is marked "expires in N days" (JSON: "expires_soon":
true): renew it before then, or the servers and clients refuse it.

On a closed cluster the command connects with an observer identity it enrolls for ten minutes
with DIR's client CA key (nothing is recorded), as 'bqserver status' does; without that key a
closed cluster's servers show as refused. It never waits longer than --timeout.

Exit 0 when at least q members serve E, 5 when fewer do (the verdict says how many more must),
1 when it cannot tell (the servers refused this command's connection).

JSON fields: name, epoch, n, f, q, reachable, serving, available, verdict, members [{id,
address, role, state, detail, epoch_state, serves, knows, issuer, issuer_in_force,
cert_not_after, days_left, expires_soon}], ca_not_after, ca_days_left, ca_expires_soon,
proposed.`,
		Example: `  bqserver server list --dir /etc/bq
  bqserver server list --dir /etc/bq --json | jq '.members[] | select(.expires_soon)'`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return cli.Usagef("--dir is required")
			}
			if timeout <= 0 {
				return cli.Usagef("--timeout must be > 0")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			l, err := listServers(ctx, dir, time.Now())
			if err != nil {
				return &cli.Exit{Code: 1, Msg: err.Error()}
			}
			if asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				err = enc.Encode(l)
			} else {
				err = l.print(stdout)
			}
			switch {
			case err != nil:
				return err
			case l.unknown && !l.Available:
				return &cli.Exit{Code: 1}
			case !l.Available:
				return &cli.Exit{Code: 5}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "cluster directory made by 'bqserver init' (required)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.DurationVar(&timeout, "timeout", 2*time.Second, "how long to wait for the servers to answer")
	return cmd
}

// The states of a member in server list.
const (
	stateReachable   = "reachable"
	stateUnreachable = "unreachable"
	stateRefused     = "refused"
	stateCorrupt     = "corrupt" // unreachable, and its directory holds the CORRUPT mark
)

// serverList is what server list shows, and its JSON.
type serverList struct {
	Name string `json:"name"`
	// Epoch is the newest configuration's number (docs/protocol.md change 43).
	Epoch         uint64       `json:"epoch"`
	N             int          `json:"n"`
	F             int          `json:"f"`
	Q             int          `json:"q"`
	Reachable     int          `json:"reachable"`
	Members       []memberLine `json:"members"`
	CANotAfter    time.Time    `json:"ca_not_after"`
	CADaysLeft    int          `json:"ca_days_left"`
	CAExpiresSoon bool         `json:"ca_expires_soon"`
	// caNote words the CA's expiry for the text listing (expiries); todo is
	// what to do about each certificate marked, one line each.
	caNote string
	todo   []string
	// noAdmission says why a closed cluster's servers were probed without
	// an admission certificate (probeServers), if they were.
	noAdmission string
	// Proposed is the number of the epoch proposed and not yet endorsed by
	// q members of this one (docs/protocol.md change 49), 0 if none.
	Proposed uint64 `json:"proposed,omitempty"`
	proposal string // its file
	// Serving counts the members that serve the newest epoch; Available:
	// at least q do, so locks are served. Verdict says it in a line.
	Serving   int    `json:"serving"`
	Available bool   `json:"available"`
	Verdict   string `json:"verdict"`
	// unknown: the servers refused this command's connection, so whether
	// they serve is not known (exit 1 rather than 5).
	unknown bool
}

// refused reports whether a member refused the probe.
func (l *serverList) refused() bool {
	for _, m := range l.Members {
		if m.State == stateRefused {
			return true
		}
	}
	return false
}

// memberLine is one server in a serverList.
type memberLine struct {
	ID      int    `json:"id"`
	Address string `json:"address"`
	// Role is roleMember, or roleLeaves for a member of the epoch before
	// that the newest left out: it seals and hands its state over, and may
	// be stopped once the newest is served by q members.
	Role   string `json:"role"`
	State  string `json:"state"`
	Detail string `json:"detail,omitempty"`
	// EpochState is what the server said of the epochs (epochServing,
	// epochCopying, epochSealed, epochBehind, epochAhead), with the
	// epochs it serves and knows; empty if it did not answer.
	EpochState string `json:"epoch_state,omitempty"`
	Serves     uint64 `json:"serves,omitempty"`
	Knows      uint64 `json:"knows,omitempty"`
	// Issuer is the common name of the cluster CA that issued the
	// member's TLS certificate; IssuerInForce is false once a rotation
	// retired that CA ('server replace' the member to retire it for good).
	Issuer        string    `json:"issuer"`
	IssuerInForce bool      `json:"issuer_in_force"`
	CertNotAfter  time.Time `json:"cert_not_after"`
	DaysLeft      int       `json:"days_left"`
	ExpiresSoon   bool      `json:"expires_soon"`
	note          string    // the expiry for the text listing
}

// A member's role in server list.
const (
	roleMember = "member"
	roleLeaves = "leaves"
)

// What a server said of the newest epoch E in DIR, in server list.
const (
	epochServing = "serving" // it serves E
	epochCopying = "copying" // it knows E and copies its state before serving it
	epochSealed  = "sealed"  // a leaving member that knows E: it serves nothing more
	epochBehind  = "behind"  // it does not know E yet: 'server push' shows it
	epochAhead   = "ahead"   // it knows an epoch after E: DIR is out of date
)

// listServers reads the cluster in dir and asks each server, and each
// server the newest epoch left out, which epochs it serves and knows,
// until ctx ends; now is the time the expiries are counted from.
func listServers(ctx context.Context, dir string, now time.Time) (*serverList, error) {
	cl, err := certs.InspectCluster(filepath.Join(dir, certs.ClusterFileName))
	if err != nil {
		return nil, err
	}
	chain, members, pool, err := cl.Newest(dir)
	if err != nil {
		return nil, err
	}
	l := expiries(cl, chain, members, now)
	if b := chain.Current(); b != nil {
		l.Epoch, l.N, l.F, l.Q = b.Number, b.N(), int(b.F), b.Quorum()
	}
	if _, ok, err := certs.ReadProposal(dir, chain.Number()+1); err != nil {
		return nil, err
	} else if ok {
		l.Proposed, l.proposal = chain.Number()+1, certs.ProposalPath(dir, chain.Number()+1)
	}
	probed := members
	if e := chain.Number(); e > 0 {
		before, err := cl.MembersOf(chain, e-1)
		if err != nil {
			return nil, err
		}
		for _, s := range before.Servers {
			if _, ok := members.Member(s.ID); !ok {
				l.Members = append(l.Members, memberLine{ID: int(s.ID), Address: s.Address, Role: roleLeaves, State: stateUnreachable})
			}
		}
		probed = before.Union(members)
	}
	states, noAdmission, err := probeServers(ctx, dir, cl, probed, pool)
	l.noAdmission = noAdmission
	if err != nil {
		return nil, err
	}
	for i := range l.Members {
		m := &l.Members[i]
		p, ok := states[wire.ServerID(m.ID)]
		if !ok {
			continue
		}
		m.State, m.Detail = p.state, p.detail
		if m.State == stateReachable && m.Role == roleMember {
			l.Reachable++
		}
		if p.answered {
			m.Serves, m.Knows = p.serves, p.knows
			m.EpochState = epochStateOf(l.Epoch, m.Role, p)
			if m.EpochState == epochServing {
				l.Serving++
			}
		}
		if p.state == stateRefused && m.Role == roleMember && noAdmission != "" {
			l.unknown = true
		}
	}
	for i := range l.Members {
		m := &l.Members[i]
		if m.State != stateUnreachable {
			continue
		}
		// A server that found its store corrupt stopped and wrote its mark
		// (docs/protocol.md change 69); it shows here when its directory is
		// in DIR, as on one machine, or copied back from its own.
		sdir := certs.ServerDir(dir, m.ID)
		if why, ok := server.CorruptMark(sdir); ok {
			m.State = stateCorrupt
			m.Detail = fmt.Sprintf("its store was found corrupt and it stopped (%s: %s): replace it, 'bqserver server replace %d --dir DIR' (the README's runbook)",
				filepath.Join(sdir, server.CorruptFileName), why, m.ID)
		}
	}
	l.verdict()
	return l, nil
}

// epochStateOf is what p says of newest epoch e for a server of role.
func epochStateOf(e uint64, role string, p probe) string {
	switch {
	case p.knows > e || p.serves > e:
		return epochAhead
	case p.knows < e:
		return epochBehind
	case role == roleLeaves:
		return epochSealed
	case p.serves == e:
		return epochServing
	}
	return epochCopying
}

// verdict sets Available and Verdict from the members' states.
func (l *serverList) verdict() {
	l.Available = l.Serving >= l.Q
	switch {
	case l.unknown && !l.Available:
		l.Verdict = fmt.Sprintf("unknown: the servers refused this command's connection, so whether %d of them serve epoch %d is not known", l.Q, l.Epoch)
	case !l.Available:
		l.Verdict = fmt.Sprintf("UNAVAILABLE: %d of %d members serve epoch %d and %d must: locks wait until %d more serve", l.Serving, l.N, l.Epoch, l.Q, l.Q-l.Serving)
	case l.Serving < l.N:
		l.Verdict = fmt.Sprintf("available, degraded: %d of %d members serve epoch %d (q=%d): %d more may fail", l.Serving, l.N, l.Epoch, l.Q, l.Serving-l.Q)
	default:
		l.Verdict = fmt.Sprintf("available: every member serves epoch %d (q=%d): %d may fail", l.Epoch, l.Q, l.Serving-l.Q)
	}
}

// expiries is the part of server list that is the cluster directory alone,
// as of now: every member unreachable until probed, every expiry counted
// and marked by metrics.ExpiryWarnings, the rule the running servers log
// by. The CA is the one in force (after a rotation, the one it named); a
// member's certificate expires with its issuer when a rotation retired that
// CA (metrics.MemberCertificate).
func expiries(cl *certs.Cluster, chain *wire.Chain, members certs.Members, now time.Time) *serverList {
	ca, _ := cl.CAInForce(chain)
	l := &serverList{Name: cl.Name, N: cl.N, F: cl.F, Q: cl.Quorum, Members: []memberLine{}, CANotAfter: ca.NotAfter.UTC()}
	// mark returns c's whole days left, whether it is marked, and the note
	// the text listing gives it; a marked one adds its line of what to do.
	mark := func(c metrics.Certificate) (days int, soon bool, note string) {
		days = int(c.NotAfter.Sub(now) / (24 * time.Hour))
		note = fmt.Sprintf("%d days left", days)
		for _, w := range metrics.ExpiryWarnings(now, []metrics.Certificate{c}) {
			soon = true
			switch {
			case w.Expired:
				note = "EXPIRED"
			case days == 0:
				note = "expires within a day"
			default:
				note = fmt.Sprintf("expires in %d days", days)
			}
			l.todo = append(l.todo, w.Msg+": "+w.Todo)
		}
		return days, soon, note
	}
	l.CADaysLeft, l.CAExpiresSoon, l.caNote = mark(metrics.Certificate{Label: metrics.CertClusterCA, What: "the cluster CA", NotAfter: ca.NotAfter})
	for _, s := range members.Servers {
		var retired *x509.Certificate
		if issuer, inForce := cl.IssuerOf(chain, s.Cert); issuer != nil && !inForce {
			retired = issuer
		}
		c := metrics.MemberCertificate(fmt.Sprintf("server %d's", s.ID), s.Cert, retired)
		m := memberLine{ID: int(s.ID), Address: s.Address, Role: roleMember, State: stateUnreachable, CertNotAfter: c.NotAfter.UTC()}
		if issuer, inForce := cl.IssuerOf(chain, s.Cert); issuer != nil {
			m.Issuer, m.IssuerInForce = issuer.Subject.CommonName, inForce
		}
		m.DaysLeft, m.ExpiresSoon, m.note = mark(c)
		l.Members = append(l.Members, m)
	}
	return l
}

func (l *serverList) print(w io.Writer) error {
	made := ""
	if l.Epoch == 0 {
		made = " (as made by bqserver init)"
	}
	fmt.Fprintf(w, "cluster %q: epoch %d%s; n=%d f=%d q=%d; %d of %d servers reachable\n",
		l.Name, l.Epoch, made, l.N, l.F, l.Q, l.Reachable, l.N)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tROLE\tADDRESS\tSTATE\tEPOCH\tISSUED BY\tCERTIFICATE EXPIRES")
	for _, m := range l.Members {
		issuer := m.Issuer
		if m.Role == roleMember && !m.IssuerInForce {
			issuer += " (retired: replace it)"
		}
		if m.Role == roleLeaves {
			issuer = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Role, m.Address, m.State, l.epochWords(m), issuer, m.certWords())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "cluster CA expires %s  %s\n", l.CANotAfter.Format(time.RFC3339), l.caNote)
	for _, m := range l.Members {
		if m.Detail != "" {
			fmt.Fprintf(w, "server %d %s: %s\n", m.ID, m.State, m.Detail)
		}
		if m.EpochState == epochAhead {
			fmt.Fprintf(w, "server %d knows epoch %d, later than this directory's %d: this directory is out of date (copy epochs/ from the operator's cluster directory)\n", m.ID, m.Knows, l.Epoch)
		}
	}
	if l.noAdmission != "" && l.refused() {
		fmt.Fprintf(w, "the servers that refused are up, but this command could not enroll an observer to connect: %s\n", l.noAdmission)
	}
	if l.Proposed != 0 {
		fmt.Fprintf(w, "epoch %d is proposed (%s) and not yet endorsed by %d servers of epoch %d: 'bqserver server push --dir DIR' gathers their endorsements\n",
			l.Proposed, l.proposal, l.Q, l.Epoch)
	}
	for _, t := range l.todo {
		fmt.Fprintln(w, t)
	}
	fmt.Fprintln(w, l.Verdict)
	return nil
}

// epochWords is the EPOCH column for m.
func (l *serverList) epochWords(m memberLine) string {
	switch m.EpochState {
	case "":
		return "-"
	case epochServing:
		return fmt.Sprintf("serving %d", m.Serves)
	case epochCopying:
		return fmt.Sprintf("copying into %d (serves %d)", m.Knows, m.Serves)
	case epochBehind:
		return fmt.Sprintf("behind: knows %d ('server push')", m.Knows)
	case epochAhead:
		return fmt.Sprintf("ahead: knows %d", m.Knows)
	case epochSealed:
		if l.Available {
			return fmt.Sprintf("sealed %d: may be stopped now", m.Serves)
		}
		return fmt.Sprintf("sealed %d: keep it running until %d members serve %d", m.Serves, l.Q, l.Epoch)
	}
	return m.EpochState
}

// certWords is the CERTIFICATE EXPIRES column for m.
func (m memberLine) certWords() string {
	if m.Role == roleLeaves {
		return "-"
	}
	return m.CertNotAfter.Format(time.RFC3339) + "  " + m.note
}

// probe is what one server's connection came to: its state and, for a
// server that answered, the epochs it serves and knows.
type probe struct {
	state, detail string
	answered      bool
	serves, knows uint64
}

// probeServers connects to every server of members as an observer and asks
// each for the epochs it serves and knows (a Status that reads nothing),
// until every one answered or refused or ctx ended. On a closed cluster the
// observer shows an admission certificate enrolled for ten minutes with
// dir's client CA key, as bqserver status does; without the key
// (noAdmission says why) the servers refuse it, which still shows they are
// up.
func probeServers(ctx context.Context, dir string, cl *certs.Cluster, members certs.Members, pool *x509.CertPool) (_ map[wire.ServerID]probe, noAdmission string, _ error) {
	key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	if err != nil {
		return nil, "", err
	}
	var adm *crypto.Signed
	if cl.Closed() {
		ca, err := certs.LoadClientCA(dir)
		if err != nil {
			noAdmission = err.Error()
		} else {
			signed, _, err := ca.Enroll(certs.EnrollOptions{Name: "operator", Key: key.Public, Locks: []string{operatorPattern}, Validity: 10 * time.Minute}, time.Now(), rand.Reader)
			if err != nil {
				return nil, "", err
			}
			adm = &signed
		}
	}
	tr, err := transport.DialClient(transport.ClientConfig{
		Key: key, Admission: adm, Observe: true, Cluster: cl.ID(), Servers: members.Addresses(), CAPool: pool, IdentifyServer: members.ByCert,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, "", err
	}
	defer tr.Close()
	out := make(map[wire.ServerID]probe, len(members.Servers))
	final := func() int {
		n := 0
		for _, p := range out {
			if p.state == stateRefused || p.answered {
				n++
			}
		}
		return n
	}
	for final() < len(members.Servers) {
		select {
		case <-ctx.Done():
			return out, noAdmission, nil
		case in, ok := <-tr.Inbound():
			if !ok {
				return out, noAdmission, nil
			}
			switch in.Kind {
			case transport.EventConnected:
				out[in.From.Server] = probe{state: stateReachable}
				_ = tr.Send(wire.ServerPeer(in.From.Server), &wire.Message{Status: &wire.Status{Req: 1, Lock: probeLock}})
			case transport.EventRefused:
				out[in.From.Server] = probe{state: stateRefused, detail: in.Err.Error()}
			case transport.EventMessage:
				if r := in.Msg.StatusReply; r != nil {
					if p, ok := out[in.From.Server]; ok && p.state == stateReachable {
						p.answered, p.serves, p.knows = true, r.Serves, r.Knows
						out[in.From.Server] = p
					}
				}
			}
		}
	}
	return out, noAdmission, nil
}

// probeLock is the lock a probe's Status names, so that a server answers
// with that lock's members (none) rather than a summary of every lock: the
// one name the operator's identity may use on a closed cluster.
const probeLock = operatorPattern
