package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/cmd/internal/cli"
	"github.com/bq-lock/bq/transport"
	"github.com/bq-lock/bq/wire"
)

// gatherEndorsements makes the proposed epoch in dir, if there is one, an
// epoch (docs/protocol.md change 49): it shows the proposal, with the
// operator's approval and the endorsements gathered so far, to every member
// of the newest epoch, takes the endorsements they answer with, and once q
// of them endorsed it writes the epoch in place of the proposal
// (certs.Complete). If ctx ends first it keeps what it gathered in the
// proposal file and fails with exit 5, naming who endorsed and who refused.
func gatherEndorsements(ctx context.Context, stdout io.Writer, dir string, op *operator) error {
	cl, err := certs.LoadCluster(filepath.Join(dir, certs.ClusterFileName))
	if err != nil {
		return &cli.Exit{Code: 1, Msg: err.Error()}
	}
	chain, _, err := cl.ChainIn(dir)
	if err != nil {
		return &cli.Exit{Code: 1, Msg: err.Error()}
	}
	n := chain.Number() + 1
	p, ok, err := certs.ReadProposal(dir, n)
	if err != nil {
		return &cli.Exit{Code: 1, Msg: err.Error()}
	}
	if !ok {
		return nil
	}
	members, err := cl.MembersOf(chain, n-1)
	if err != nil {
		return &cli.Exit{Code: 1, Msg: err.Error()}
	}
	keys, q, _ := chain.Keyring(n - 1)
	by := map[wire.ServerID]wire.SignedEndorsement{}
	take := func(es []wire.SignedEndorsement) {
		for _, x := range es {
			if b, err := x.Verify(keys); err == nil && b.Number == n && b.Hash == wire.EpochHash(p.Proposal) {
				by[b.Server] = x
			}
		}
	}
	take(p.Endorsements)
	endorsed := func() (wire.Epoch, bool) {
		ep := wire.Epoch{Signed: p.Proposal}
		for _, id := range slices.Sorted(maps.Keys(by)) {
			ep.Endorsements = append(ep.Endorsements, by[id])
		}
		try, _, _ := cl.ChainIn(dir)
		_, err := try.Extend([]wire.Epoch{ep})
		return ep, err == nil
	}
	if ep, ok := endorsed(); ok {
		return complete(stdout, dir, n, ep)
	}
	tr, err := transport.DialClient(transport.ClientConfig{
		Key: op.key, Admission: op.admission, Cluster: cl.ID(), Servers: members.Addresses(), CAPool: cl.CAPoolOf(chain), IdentifyServer: members.ByCert,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return &cli.Exit{Code: 1, Msg: err.Error()}
	}
	defer tr.Close()
	refused := map[wire.ServerID]string{}
	up := map[wire.ServerID]bool{}
	show := func(s wire.ServerID) {
		m := *p
		m.Endorsements = nil
		for _, id := range slices.Sorted(maps.Keys(by)) {
			m.Endorsements = append(m.Endorsements, by[id])
		}
		_ = tr.Send(wire.ServerPeer(s), &wire.Message{Endorse: &m})
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if ep, ok := endorsed(); ok {
			return complete(stdout, dir, n, ep)
		}
		select {
		case <-ctx.Done():
			p.Endorsements = nil
			for _, id := range slices.Sorted(maps.Keys(by)) {
				p.Endorsements = append(p.Endorsements, by[id])
			}
			_ = certs.WriteProposal(dir, n, p) // what was gathered is not lost
			return &cli.Exit{Code: 5, Msg: endorsementShortfall(n, q, len(members.Servers), by, refused, dir)}
		case <-tick.C:
			for s := range up {
				if _, done := by[s]; !done {
					show(s)
				}
			}
		case in, ok := <-tr.Inbound():
			if !ok {
				return &cli.Exit{Code: 5, Msg: endorsementShortfall(n, q, len(members.Servers), by, refused, dir)}
			}
			switch in.Kind {
			case transport.EventConnected:
				up[in.From.Server] = true
				show(in.From.Server)
			case transport.EventDisconnected:
				delete(up, in.From.Server)
			case transport.EventRefused:
				refused[in.From.Server] = in.Err.Error()
			case transport.EventMessage:
				switch m := in.Msg; {
				case m.Endorse != nil && string(m.Endorse.Proposal.Body) == string(p.Proposal.Body):
					take(m.Endorse.Endorsements)
				case m.Error != nil:
					refused[in.From.Server] = m.Error.Detail
				}
			}
		}
	}
}

// complete writes endorsed epoch n in place of its proposal.
func complete(stdout io.Writer, dir string, n uint64, ep wire.Epoch) error {
	if err := certs.Complete(dir, n, ep); err != nil {
		return &cli.Exit{Code: 1, Msg: err.Error()}
	}
	ids := make([]string, len(ep.Endorsements))
	for i, x := range ep.Endorsements {
		ids[i] = fmt.Sprint(x.Server)
	}
	fmt.Fprintf(stdout, "epoch %d endorsed by servers %s: written to %s\n", n, strings.Join(ids, " "), certs.EpochPath(dir, n))
	return nil
}

// endorsementShortfall says why proposed epoch n is not an epoch yet and
// what to do.
func endorsementShortfall(n uint64, q, members int, by map[wire.ServerID]wire.SignedEndorsement, refused map[wire.ServerID]string, dir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "epoch %d is proposed but endorsed by %d of the %d servers of epoch %d (%d must, change 49)", n, len(by), members, n-1, q)
	var ids []int
	for id := range refused {
		if _, ok := by[id]; !ok {
			ids = append(ids, int(id))
		}
	}
	sort.Ints(ids)
	for _, id := range ids {
		fmt.Fprintf(&b, "; server %d refused: %s", id, refused[wire.ServerID(id)])
	}
	fmt.Fprintf(&b, "; the proposal stays in %s with what was gathered: run 'bqserver server push --dir %s' when enough of them are up", certs.ProposalPath(dir, n), dir)
	return b.String()
}
