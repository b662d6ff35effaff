package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/cmd/internal/cli"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/transport"
	"github.com/bq-lock/bq/wire"
)

// Reconfiguration, the operator's commands (docs/protocol.md change 43):
// each plans the next epoch from DIR, signs it with DIR's cluster CA key,
// approves it with DIR's client CA key (a closed cluster's, change 49) or
// operator key (an open cluster's, change 65), writes it (and a new
// member's private material) into DIR, gathers the members' endorsements,
// and pushes it to the running servers, which seal the old epoch and copy
// its state.

func serverAddCmd(stdout io.Writer) *cobra.Command {
	var o changeOpts
	cmd := &cobra.Command{
		Use:   "add --dir DIR [--host H] [--port P]",
		Short: "Add a server: n+1, f and q follow n",
		Long: `Make a new server (keys and certificate under the cluster CA, its private material in
DIR/server-<id>/ as 'bqserver init' writes it, with the next id never used), sign the next epoch
with it as a member (f = ⌊(n−1)/3⌋ of the new n), write it to DIR/epochs/ and push it to the
running servers. Start the new server with 'bqserver run --dir DIR --id <id>' on its machine, with
DIR's cluster.yaml and epochs/ beside its server-<id>/. While the new epoch needs the new server
to reach its quorum, the cluster waits for it: start it at once.` + checksHelp,
		Example: `  bqserver server add --dir /etc/bq --host 10.0.0.5 --port 7000`,
		Args:    cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), stdout, certs.Change{Add: true, Host: o.host, Port: o.port})
		},
	}
	o.flags(cmd, true, true)
	return cmd
}

func serverRemoveCmd(stdout io.Writer) *cobra.Command {
	var o changeOpts
	cmd := &cobra.Command{
		Use:   "remove ID --dir DIR",
		Short: "Remove a server: n−1, f and q follow n",
		Long: `Sign the next epoch without server ID (f = ⌊(n−1)/3⌋ of the new n), write it to DIR/epochs/
and push it to the running servers. The removed server seals: it serves nothing more and hands
its state to the remaining members; stop it once they serve the new epoch and destroy its keys
(DIR/server-<ID>/). Its signatures count for nobody who knows the new epoch. A removal that
lowers f (7 → 6 members tolerate one faulty server, not two) needs --fewer-faults.` + checksHelp,
		Example: `  bqserver server remove 2 --dir /etc/bq`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := serverIDArg(args[0])
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), stdout, certs.Change{Remove: &id})
		},
	}
	o.flags(cmd, false, true)
	cmd.Flags().BoolVar(&o.fewerFaults, "fewer-faults", false, "remove even though the new n tolerates fewer faulty servers (7 → 6 members: f 2 → 1)")
	return cmd
}

func serverReplaceCmd(stdout io.Writer) *cobra.Command {
	var o changeOpts
	cmd := &cobra.Command{
		Use:   "replace ID --dir DIR [--host H] [--port P]",
		Short: "Replace a server with a new one (new keys, certificate and id): rotation and renewal",
		Long: `Make a new server as 'server add' does and sign the next epoch with it in place of server ID
(n and f stay). This is how a compromised or dead server is replaced, and how a member's keys are
rotated and its certificate renewed: the new member has a new id, since an id names one key for
ever. Start the new server with 'bqserver run --dir DIR --id <new id>'; stop the old one once the
new epoch is served, and destroy its keys.` + checksHelp,
		Example: `  bqserver server replace 2 --dir /etc/bq --host 10.0.0.9 --port 7000`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := serverIDArg(args[0])
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), stdout, certs.Change{Remove: &id, Add: true, Host: o.host, Port: o.port})
		},
	}
	o.flags(cmd, true, true)
	return cmd
}

func serverPushCmd(stdout io.Writer) *cobra.Command {
	var o changeOpts
	cmd := &cobra.Command{
		Use:   "push --dir DIR",
		Short: "Show the running servers the newest epoch in DIR/epochs again",
		Long: `Push the epochs in DIR/epochs to every server of the newest epoch and the one before, and
wait until they know it: after 'server add', 'remove' or 'replace' could not reach enough
servers. Servers also learn it from each other and from clients.`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), stdout, certs.Change{})
		},
	}
	o.flags(cmd, false, false)
	return cmd
}

// checksHelp ends the help of every command that signs a change.
const checksHelp = `

Before anything is signed, the change is checked (nothing is written if a check fails): a new
server's address must be its own (no member's, and, on this machine, a free UDP port; a
replacement may take the address of the server it replaces, which must then stop first), a
removal must not lower f unasked, and a quorum of the current members must answer, since they
must endorse the change (exit 5 if not; --force proposes it anyway, for 'server push' to complete
once they are up). --dry-run runs the checks and prints the epoch that would be signed.`

// caChecksHelp ends the help of the CA commands, which sign a change too.
const caChecksHelp = `

Before anything is signed, a quorum of the current members must answer, since they must endorse
the change (exit 5 if not); --dry-run runs the check and prints the epoch that would be signed.`

func serverIDArg(s string) (wire.ServerID, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, cli.Usagef("ID must be a server id (a whole number), not %q", s)
	}
	return wire.ServerID(n), nil
}

type changeOpts struct {
	dir     string
	host    string
	port    int
	timeout time.Duration
	// The checks before signing (preflight.go): dryRun signs and writes
	// nothing, force proposes with fewer than q members answering, and
	// fewerFaults lets a removal lower f.
	dryRun, force, fewerFaults bool
}

// flags registers the flags of a change command; place: it adds a server
// (--host, --port); change: it signs a change (not push), so it is checked
// first (--dry-run, --force).
func (o *changeOpts) flags(cmd *cobra.Command, place, change bool) {
	cmd.Flags().StringVar(&o.dir, "dir", "", "cluster directory made by 'bqserver init', with its CA key (required)")
	if place {
		cmd.Flags().StringVar(&o.host, "host", "", "the new server's host (default: the replaced server's, or the first member's)")
		cmd.Flags().IntVar(&o.port, "port", 0, "the new server's UDP port (default: the next above every member's on that host)")
	}
	if change {
		cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "check the change and print the epoch it would sign, then stop: nothing is signed or written")
		if cmd.Flags().Lookup("force") == nil {
			cmd.Flags().BoolVar(&o.force, "force", false, "propose the change even though fewer members answer than must endorse it ('server push' completes it when they are up)")
		}
	}
	cmd.Flags().DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to wait for the running servers to take the new epoch")
}

// run plans, writes and pushes the change (no change: pushes what DIR has).
func (o *changeOpts) run(ctx context.Context, stdout io.Writer, ch certs.Change) error {
	if o.dir == "" {
		return cli.Usagef("--dir is required")
	}
	if o.timeout <= 0 {
		return cli.Usagef("--timeout must be > 0")
	}
	// The operator's identity, enrolled before the change: a client-CA
	// rotation replaces the key, and the servers admit the new CA only
	// once they take the epoch this push brings.
	op, err := operatorIdentity(o.dir)
	if err != nil {
		return &cli.Exit{Code: 1, Msg: err.Error()}
	}
	if ch.Remove != nil || ch.Add || ch.RotateCA || ch.RotateClientCA || ch.RetireClientCAs || ch.RotateOperator {
		p, err := certs.PlanChange(o.dir, ch, time.Now(), rand.Reader)
		if err != nil {
			return &cli.Exit{Code: 1, Msg: err.Error()}
		}
		// Checked before anything is signed for good or written (issue 44).
		pf, err := checkChange(ctx, o.dir, p, o)
		if o.dryRun {
			describePlan(stdout, o.dir, p, true)
			printMembers(stdout, p)
			if pf != nil {
				pf.print(stdout, p)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "dry run: the checks pass; nothing was signed or written\n")
			return nil
		}
		if err != nil {
			return err
		}
		if err := p.Write(o.dir); err != nil {
			return &cli.Exit{Code: 1, Msg: err.Error()}
		}
		describePlan(stdout, o.dir, p, false)
		pf.print(stdout, p)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	// A proposed epoch counts once q members of the epoch before endorse
	// it (change 49): gather their endorsements first.
	if err := gatherEndorsements(ctx, stdout, o.dir, op); err != nil {
		return err
	}
	r, err := pushEpochs(ctx, o.dir, op)
	if err != nil {
		return &cli.Exit{Code: 1, Msg: err.Error()}
	}
	r.print(stdout)
	if r.sealed < r.qBefore {
		return &cli.Exit{Code: 5, Msg: fmt.Sprintf("only %d of the %d servers of epoch %d took epoch %d within %v (%d must, to seal it): the epoch is written; run 'bqserver server push --dir %s' when they are up",
			r.sealed, r.nBefore, r.epoch-1, r.epoch, o.timeout, r.qBefore, o.dir)}
	}
	return nil
}

// describePlan says what plan p proposes and what to do about it; dry: it
// was not written (a dry run).
func describePlan(w io.Writer, dir string, p *certs.Plan, dry bool) {
	ids := make([]string, len(p.Next.Members))
	for i, m := range p.Next.Members {
		ids[i] = strconv.Itoa(int(m.ID))
	}
	where := "proposed in " + certs.ProposalPath(dir, p.Next.Number)
	if dry {
		where = "would be proposed (dry run: nothing signed or written)"
	}
	fmt.Fprintf(w, "epoch %d %s: members %s (n=%d f=%d q=%d; epoch %d had n=%d f=%d); it counts once %d servers of epoch %d endorse it\n",
		p.Next.Number, where, strings.Join(ids, " "), p.Next.N(), p.Next.F, p.Next.Quorum(),
		p.Before.Number, p.Before.N(), p.Before.F, p.Before.Quorum(), p.Before.Number)
	for _, m := range p.Before.Members {
		if _, ok := p.Next.Member(m.ID); !ok {
			fmt.Fprintf(w, "server %d (%s) leaves: stop it once 'bqserver server list' shows epoch %d served by %d members, then destroy %s\n",
				m.ID, m.Address, p.Next.Number, p.Next.Quorum(), certs.ServerDir(dir, int(m.ID)))
		}
	}
	if m, ok := p.TakesAddressOf(); ok {
		fmt.Fprintf(w, "server %d takes server %d's address %s: once server %d has sealed epoch %d (this command's table says so), stop it, then start server %d\n",
			p.Added.Entry.ID, m.ID, m.Address, m.ID, p.Before.Number, p.Added.Entry.ID)
	}
	if p.NextClientCA != nil {
		fmt.Fprintf(w, "a new client CA is in force, its key in %s: client add, renew and revoke use it; clients of the older ones are admitted until 'bqserver ca retire-clients'\n",
			filepath.Join(dir, certs.CADirName, certs.ClientCAKeyFile))
	}
	if p.NextOperator != nil {
		fmt.Fprintf(w, "a new operator key approves every change after epoch %d: it takes the old one's place in %s once epoch %d is endorsed (until then the old key approves); keep it apart from ca.key\n",
			p.Next.Number, filepath.Join(dir, certs.CADirName, certs.OperatorKeyFile), p.Next.Number)
	}
	if len(p.Next.ClientCAs) < len(p.Before.ClientCAs) {
		fmt.Fprintf(w, "the older client CAs are retired: only certificates of the newest admit from epoch %d on\n", p.Next.Number)
	}
	if ca := p.NextCA; ca != nil {
		fmt.Fprintf(w, "the cluster CA is now %q (valid until %s), its key in %s; epochs after %d are signed by it and new servers get its certificates; members keep theirs (issued by the old CA) until replaced\n",
			ca.Cert.Subject.CommonName, ca.Cert.NotAfter.Format(time.DateOnly), filepath.Join(dir, certs.CADirName, certs.CAKeyFile), p.Next.Number)
	}
	if a := p.Added; a != nil {
		fmt.Fprintf(w, "server %d is new, at %s: once epoch %d is endorsed, copy %s, %s/ and %s/ to its machine and start it there:\n  bqserver run --dir %s --id %d\n",
			a.Entry.ID, a.Entry.Address, p.Next.Number, filepath.Join(dir, certs.ClusterFileName), filepath.Join(dir, certs.EpochsDirName),
			certs.ServerDir(dir, int(a.Entry.ID)), dir, a.Entry.ID)
	}
}

// operator is the short-lived identity the operator's push connects with.
type operator struct {
	key       *crypto.PrivateKey
	admission *crypto.Signed // nil on an open cluster
}

// operatorIdentity makes a key and, on a closed cluster, enrolls it for ten
// minutes with DIR's client CA, for the operator's pattern only.
func operatorIdentity(dir string) (*operator, error) {
	cl, err := certs.LoadCluster(filepath.Join(dir, certs.ClusterFileName))
	if err != nil {
		return nil, err
	}
	key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	if err != nil {
		return nil, err
	}
	op := &operator{key: key}
	if cl.Closed() {
		ca, err := certs.LoadClientCA(dir)
		if err != nil {
			return nil, fmt.Errorf("a closed cluster's servers admit the operator's push only with an identity the client CA enrolls: %w", err)
		}
		signed, _, err := ca.Enroll(certs.EnrollOptions{Name: "operator", Key: key.Public, Locks: []string{operatorPattern}, Validity: 10 * time.Minute}, time.Now(), rand.Reader)
		if err != nil {
			return nil, err
		}
		op.admission = &signed
	}
	return op, nil
}

// pushed is what the running servers said of the newest epoch.
type pushed struct {
	epoch            uint64
	nBefore, qBefore int
	// sealed counts members of the epoch before that know epoch.
	sealed  int
	serving int // members of epoch that serve it
	lines   []pushLine
}

type pushLine struct {
	id      wire.ServerID
	address string
	role    string // "member", "new", "leaves"
	state   string
}

// pushEpochs shows every server of the newest epoch in dir and of the one
// before it the chain, and asks each for its epochs until every reachable
// one knows the newest and the new epoch's quorum serves it, or ctx ends.
func pushEpochs(ctx context.Context, dir string, op *operator) (*pushed, error) {
	cl, err := certs.LoadCluster(filepath.Join(dir, certs.ClusterFileName))
	if err != nil {
		return nil, err
	}
	chain, _, err := cl.ChainIn(dir)
	if err != nil {
		return nil, err
	}
	n := chain.Number()
	if n == 0 {
		return nil, fmt.Errorf("%s holds no epoch after the cluster file: nothing to push (server add, remove or replace make one)", dir)
	}
	before, err := cl.MembersOf(chain, n-1)
	if err != nil {
		return nil, err
	}
	now, err := cl.MembersOf(chain, n)
	if err != nil {
		return nil, err
	}
	all := before.Union(now)
	tr, err := transport.DialClient(transport.ClientConfig{
		Key: op.key, Admission: op.admission, Cluster: cl.ID(), Servers: all.Addresses(), CAPool: cl.CAPoolOf(chain), IdentifyServer: all.ByCert,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	news := &wire.Message{EpochNews: wire.NewsOf(chain.Since(n - min(n, wire.MaxEpochNews)))}
	replies := map[wire.ServerID]*wire.StatusReply{}
	refused := map[wire.ServerID]string{}
	up := map[wire.ServerID]bool{}
	ask := func(s wire.ServerID) {
		_ = tr.Send(wire.ServerPeer(s), news)
		_ = tr.Send(wire.ServerPeer(s), &wire.Message{Status: &wire.Status{Req: 1}})
	}
	r := &pushed{epoch: n, nBefore: len(before.Servers), qBefore: cl.Quorum}
	if n > 1 {
		r.qBefore = chain.Body(n - 1).Quorum()
	}
	qNow := chain.Body(n).Quorum()
	done := func() bool {
		r.sealed, r.serving = 0, 0
		for id, rep := range replies {
			if _, ok := before.Member(id); ok && rep.Knows >= n {
				r.sealed++
			}
			if _, ok := now.Member(id); ok && rep.Serves >= n {
				r.serving++
			}
		}
		for id := range up {
			if rep := replies[id]; rep == nil || rep.Knows < n {
				return false
			}
		}
		return r.sealed >= r.qBefore && r.serving >= qNow
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
wait:
	for !done() {
		select {
		case <-ctx.Done():
			break wait
		case <-tick.C:
			for id := range up {
				if rep := replies[id]; rep == nil || rep.Knows < n || rep.Serves < n {
					ask(id)
				}
			}
		case in, ok := <-tr.Inbound():
			if !ok {
				break wait
			}
			switch in.Kind {
			case transport.EventConnected:
				up[in.From.Server] = true
				ask(in.From.Server)
			case transport.EventDisconnected:
				delete(up, in.From.Server)
			case transport.EventRefused:
				refused[in.From.Server] = in.Err.Error()
			case transport.EventMessage:
				if rep := in.Msg.StatusReply; rep != nil {
					replies[in.From.Server] = rep
				}
			}
		}
	}
	done()
	for _, m := range all.Servers {
		l := pushLine{id: m.ID, address: m.Address, role: "member"}
		_, old := before.Member(m.ID)
		_, cur := now.Member(m.ID)
		switch {
		case !cur:
			l.role = "leaves"
		case !old:
			l.role = "new"
		}
		rep := replies[m.ID]
		switch {
		case refused[m.ID] != "":
			l.state = "refused: " + refused[m.ID]
		case rep == nil && l.role == "new":
			l.state = "not answering: start it"
		case rep == nil && up[m.ID]:
			l.state = "connected, no answer yet ('server list' shows it)"
		case rep == nil:
			l.state = "not answering (yet)"
		case rep.Serves >= n:
			l.state = fmt.Sprintf("serves epoch %d", rep.Serves)
		case rep.Knows >= n && !cur:
			l.state = fmt.Sprintf("sealed epoch %d: hands its state over; stop it once the new members serve", rep.Serves)
		case rep.Knows >= n:
			l.state = fmt.Sprintf("knows epoch %d, copying the state of epoch %d", rep.Knows, rep.Serves)
		default:
			l.state = fmt.Sprintf("still in epoch %d", rep.Knows)
		}
		r.lines = append(r.lines, l)
	}
	return r, nil
}

func (r *pushed) print(w io.Writer) {
	fmt.Fprintf(w, "epoch %d: %d of %d servers of epoch %d know it (%d must); %d members serve it\n",
		r.epoch, r.sealed, r.nBefore, r.epoch-1, r.qBefore, r.serving)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tROLE\tSTATE")
	for _, l := range r.lines {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", l.id, l.address, l.role, l.state)
	}
	_ = tw.Flush()
}

func caCmd(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Rotate the cluster CA, the client CA and the operator key",
	}
	cmd.AddCommand(caRotateCmd(stdout), caRotateClientsCmd(stdout), caRetireClientsCmd(stdout), caRotateOperatorCmd(stdout))
	return cli.Group(cmd)
}

func caRotateClientsCmd(stdout io.Writer) *cobra.Command {
	var o changeOpts
	cmd := &cobra.Command{
		Use:   "rotate-clients --dir DIR",
		Short: "Make a new client CA; the old one still admits its clients until retired",
		Long: `Make a new client CA and sign the next epoch listing it beside the client CAs in force: from then
on 'client add', 'renew' and 'revoke' use the new key (DIR/ca/client-ca.key; the old key is gone),
and the servers admit certificates of both. Renew every client ('bqserver client renew NAME'), then
retire the old CA with 'bqserver ca retire-clients'. A revocation signed by any client CA the
cluster ever listed stays valid.` + caChecksHelp,
		Example: `  bqserver ca rotate-clients --dir /etc/bq`,
		Args:    cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), stdout, certs.Change{RotateClientCA: true})
		},
	}
	o.flags(cmd, false, true)
	return cmd
}

func caRetireClientsCmd(stdout io.Writer) *cobra.Command {
	var o changeOpts
	var force bool
	cmd := &cobra.Command{
		Use:   "retire-clients --dir DIR [--force]",
		Short: "Stop admitting certificates of every client CA but the newest",
		Long: `Sign the next epoch listing only the newest client CA: the servers refuse admission certificates
of the older ones from then on. It refuses while an enrolled client (not revoked, not expired) has
a certificate of an older CA, and names them: renew them first, or pass --force to lock them out.` + caChecksHelp,
		Example: `  bqserver ca retire-clients --dir /etc/bq`,
		Args:    cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.dir == "" {
				return cli.Usagef("--dir is required")
			}
			ca, err := certs.LoadClientCA(o.dir)
			if err != nil {
				return &cli.Exit{Code: 1, Msg: err.Error()}
			}
			stale, err := ca.NotRenewed(time.Now())
			if err != nil {
				return &cli.Exit{Code: 1, Msg: err.Error()}
			}
			if len(stale) > 0 && !force {
				return &cli.Exit{Code: 1, Msg: fmt.Sprintf("%d enrolled clients still have a certificate of an older client CA: %s; renew each (bqserver client renew NAME --dir %s) or pass --force to lock them out",
					len(stale), strings.Join(stale, ", "), o.dir)}
			}
			return o.run(cmd.Context(), stdout, certs.Change{RetireClientCAs: true})
		},
	}
	// Its --force is its own (lock the stale clients out), registered first:
	// the quorum check has no override here.
	cmd.Flags().BoolVar(&force, "force", false, "retire even though enrolled clients still hold certificates of an older client CA")
	o.flags(cmd, false, true)
	return cmd
}

func caRotateCmd(stdout io.Writer) *cobra.Command {
	var o changeOpts
	cmd := &cobra.Command{
		Use:   "rotate --dir DIR",
		Short: "Make a new cluster CA and hand the cluster over to it",
		Long: `Make a new cluster CA and sign, with the old one, the next epoch naming it (the same members):
every later epoch is signed by the new CA, and every server added after it gets a certificate of
the new CA. The new key takes the place of the old in DIR/ca/ca.key; the old key is gone. The
servers and clients trust both CAs: a member's certificate issued by the old CA stays valid to
its end. To retire the old CA entirely (it expires, or its key leaked), replace each member with
'bqserver server replace' after the rotation.` + caChecksHelp,
		Example: `  bqserver ca rotate --dir /etc/bq`,
		Args:    cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), stdout, certs.Change{RotateCA: true})
		},
	}
	o.flags(cmd, false, true)
	return cmd
}

func caRotateOperatorCmd(stdout io.Writer) *cobra.Command {
	var o changeOpts
	cmd := &cobra.Command{
		Use:   "rotate-operator --dir DIR",
		Short: "Make a new operator key of an open cluster; the old one approves nothing after it",
		Long: `Make a new operator key and sign the next epoch naming it in place of the one in force (the same
members), approved by the old key (DIR/ca/operator.key). Once the members endorse it, the new key
takes the old one's place in DIR/ca/operator.key and approves every later change; the old key
approves nothing more (docs/protocol.md change 65). Do it when the old key may have leaked: with
the cluster CA's key it could change the members, or take an epoch number before you and freeze
the changes. An open cluster made before change 65 (no approver in its cluster file) has no
operator key; a closed cluster's changes are approved by its client CA (ca rotate-clients).` + caChecksHelp,
		Example: `  bqserver ca rotate-operator --dir /etc/bq`,
		Args:    cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), stdout, certs.Change{RotateOperator: true})
		},
	}
	o.flags(cmd, false, true)
	return cmd
}
