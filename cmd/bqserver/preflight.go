package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/cmd/internal/cli"
)

// Checking a change before it is signed (issue 44). certs.PlanChange
// refuses what the cluster directory alone shows wrong (a member's address
// for a new one); preflight adds what only this machine and the running
// cluster show: a port in use here, a change that lowers f unasked, and
// fewer members answering than must endorse it. A change that passes can
// complete at once; one that fails signs and writes nothing.

// checkWithin bounds how long preflight waits for the members to answer.
const checkWithin = 3 * time.Second

// preflight is what the checks found.
type preflight struct {
	reachable, need int // members of the epoch now that answer, and its q
	down            []string
	// newNeeded: the next epoch's quorum needs the new member, so the
	// cluster waits for it once the old members seal.
	newNeeded bool
}

// checkChange runs the checks of plan p against the cluster in dir. It
// returns the exit that refuses the change, or nil; force skips the
// reachability check (the proposal then waits for 'server push').
func checkChange(ctx context.Context, dir string, p *certs.Plan, o *changeOpts) (*preflight, error) {
	if p.Next.F < p.Before.F && !o.fewerFaults {
		return nil, &cli.Exit{Code: 1, Msg: fmt.Sprintf(
			"the change leaves n=%d, which tolerates f=%d faulty servers where epoch %d (n=%d) tolerates %d: nothing was signed; pass --fewer-faults to do it anyway, or use 'server replace', which keeps f",
			p.Next.N(), p.Next.F, p.Before.Number, p.Before.N(), p.Before.F)}
	}
	if _, inPlace := p.TakesAddressOf(); p.Added != nil && !inPlace {
		a := p.Added
		if err := portFreeHere(a.Entry.Address); err != nil {
			return nil, &cli.Exit{Code: 1, Msg: fmt.Sprintf("the new server's address %s: %v: nothing was signed; choose another --port (or --host)", a.Entry.Address, err)}
		}
	}
	cl, err := certs.InspectCluster(filepath.Join(dir, certs.ClusterFileName))
	if err != nil {
		return nil, &cli.Exit{Code: 1, Msg: err.Error()}
	}
	_, members, pool, err := cl.Newest(dir)
	if err != nil {
		return nil, &cli.Exit{Code: 1, Msg: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, min(checkWithin, o.timeout))
	defer cancel()
	states, noAdmission, err := probeServers(ctx, dir, cl, members, pool)
	if err != nil {
		return nil, &cli.Exit{Code: 1, Msg: err.Error()}
	}
	pf := &preflight{need: p.Before.Quorum()}
	keptUp := 0
	for _, m := range members.Servers {
		st := states[m.ID]
		if st.state != stateReachable {
			why := cmp.Or(st.state, stateUnreachable)
			if st.detail != "" {
				why += ": " + st.detail
			}
			pf.down = append(pf.down, fmt.Sprintf("server %d (%s) %s", m.ID, m.Address, why))
			continue
		}
		pf.reachable++
		if _, ok := p.Next.Member(m.ID); ok {
			keptUp++
		}
	}
	pf.newNeeded = p.Added != nil && keptUp < p.Next.Quorum() && pf.reachable >= pf.need
	if pf.reachable < pf.need && !o.force {
		msg := fmt.Sprintf("only %d of the %d servers of epoch %d answer, and %d must endorse the change: nothing was signed; start them ('bqserver server list --dir %s' shows which are down), or pass --force to write the proposal for 'bqserver server push' to complete later; down: %s",
			pf.reachable, len(members.Servers), p.Before.Number, pf.need, dir, strings.Join(pf.down, "; "))
		if noAdmission != "" {
			msg += "; this command could not enroll an observer to connect: " + noAdmission
		}
		return pf, &cli.Exit{Code: 5, Msg: msg}
	}
	return pf, nil
}

// portFreeHere refuses addr when its host is this machine and something
// here holds its UDP port already (another server, of this cluster or
// not). An address of another machine is not checked: its port is that
// machine's to give.
func portFreeHere(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if !isLocalHost(host) {
		return nil
	}
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			err = op.Err
		}
		return fmt.Errorf("its UDP port is in use on this machine (%v)", err)
	}
	return c.Close()
}

// isLocalHost reports whether host names an address of this machine.
func isLocalHost(host string) bool {
	ips, err := net.LookupIP(host)
	if err != nil {
		return false
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if ip.IsLoopback() {
			return true
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}

// print says what the checks found, after the plan.
func (pf *preflight) print(w io.Writer, p *certs.Plan) {
	fmt.Fprintf(w, "checked: %d of the %d servers of epoch %d answer (%d must endorse)\n", pf.reachable, p.Before.N(), p.Before.Number, pf.need)
	for _, d := range pf.down {
		fmt.Fprintf(w, "  down: %s\n", d)
	}
	if pf.newNeeded {
		fmt.Fprintf(w, "epoch %d's quorum (%d) needs server %d: once the old members seal, locks wait until it serves; start it at once\n",
			p.Next.Number, p.Next.Quorum(), p.Added.Entry.ID)
	}
}

// printMembers lists the next epoch's members and those that leave, for a
// dry run: what would be signed.
func printMembers(w io.Writer, p *certs.Plan) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tIN EPOCH "+fmt.Sprint(p.Next.Number))
	for _, m := range p.Next.Members {
		role := "member"
		if _, ok := p.Before.Member(m.ID); !ok {
			role = "new"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\n", m.ID, m.Address, role)
	}
	for _, m := range p.Before.Members {
		if _, ok := p.Next.Member(m.ID); !ok {
			fmt.Fprintf(tw, "%d\t%s\t%s\n", m.ID, m.Address, "leaves")
		}
	}
	_ = tw.Flush()
}
