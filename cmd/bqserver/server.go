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
		Long: `List the cluster in DIR: its newest epoch (0 is the one 'bqserver init' made), n, f and the quorum q; for each server its id, address, state and when its TLS certificate expires;
then when the cluster CA expires. A certificate that expires within 30 days is marked "expires in N
days" (JSON: "expires_soon": true): renew it before then, or the servers and clients refuse it.

The state is "reachable" (it answered as this cluster's server within --timeout), "unreachable", or
"refused" (it answered and refused this command's connection; the text says why). On a closed
cluster the command connects with an observer identity it enrolls for ten minutes with DIR's client
CA key (nothing is recorded), as 'bqserver status' does; without that key a closed cluster's servers
show as refused. It never waits longer than --timeout.

JSON fields: name, epoch, n, f, q, reachable, members [{id, address, state, detail, cert_not_after,
days_left, expires_soon}], ca_not_after, ca_days_left, ca_expires_soon.`,
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
				return enc.Encode(l)
			}
			return l.print(stdout)
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
	ID           int       `json:"id"`
	Address      string    `json:"address"`
	State        string    `json:"state"`
	Detail       string    `json:"detail,omitempty"`
	CertNotAfter time.Time `json:"cert_not_after"`
	DaysLeft     int       `json:"days_left"`
	ExpiresSoon  bool      `json:"expires_soon"`
	note         string    // the expiry for the text listing
}

// listServers reads the cluster in dir and asks each server whether it
// answers until ctx ends; now is the time the expiries are counted from.
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
	states, noAdmission, err := probeServers(ctx, dir, cl, members, pool)
	l.noAdmission = noAdmission
	if err != nil {
		return nil, err
	}
	for i := range l.Members {
		m := &l.Members[i]
		if p, ok := states[wire.ServerID(m.ID)]; ok {
			m.State, m.Detail = p.state, p.detail
		}
		if m.State == stateReachable {
			l.Reachable++
		}
	}
	return l, nil
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
		m := memberLine{ID: int(s.ID), Address: s.Address, State: stateUnreachable, CertNotAfter: c.NotAfter.UTC()}
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
	fmt.Fprintln(tw, "ID\tADDRESS\tSTATE\tCERTIFICATE EXPIRES")
	for _, m := range l.Members {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", m.ID, m.Address, m.State, m.CertNotAfter.Format(time.RFC3339), m.note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "cluster CA expires %s  %s\n", l.CANotAfter.Format(time.RFC3339), l.caNote)
	for _, m := range l.Members {
		if m.Detail != "" {
			fmt.Fprintf(w, "server %d %s: %s\n", m.ID, m.State, m.Detail)
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
	return nil
}

// probe is what one server's connection came to.
type probe struct{ state, detail string }

// probeServers connects to every server of cl as an observer (reading
// nothing) and returns, for each that answered before ctx ended, whether it
// took the connection or refused it. On a closed cluster the observer shows
// an admission certificate enrolled for ten minutes with dir's client CA
// key, as bqserver status does; without the key (noAdmission says why) the
// servers refuse it, which still shows they are up.
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
	for len(out) < len(members.Servers) {
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
			case transport.EventRefused:
				out[in.From.Server] = probe{state: stateRefused, detail: in.Err.Error()}
			}
		}
	}
	return out, noAdmission, nil
}
