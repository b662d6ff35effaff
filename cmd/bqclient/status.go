package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/cmd/internal/cli"
	"github.com/bq-lock/bq/wire"
)

func statusCmd(g *globals, std stdio) *cobra.Command {
	var asJSON bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status [NAME] [--json]",
		Short: "Show the servers, the faults tolerated now, and a lock's holders and queue",
		Long: `Show which servers answer and how many more may fail, and with NAME the lock's holders (each with
its mode and fencing token: one, or readers and a semaphore's holders together), its queue in the
order it will enter (each with its mode, and "waiting" with its ticket or "choosing a ticket"), and
its suspected and banned clients. --json has the same: "holders", "queue" (no holder is in it),
each entry with "mode" and "state"; "holder" is the first of "holders". Without NAME, the locks in
use. status only observes: it connects with this identity (which a
closed cluster must have enrolled) on observer connections that open no session, so it works while
a bqclient lock of the same identity runs and never disturbs it. On an open cluster with no
identity file yet it uses a throwaway key.`,
		Example: `  bqclient status deploy
  bqclient status deploy --json | jq .lock.holder.token
  bqclient status config --json | jq '.lock.holders[].token, .lock.queue[].state'`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return cli.Usagef("at most one lock NAME")
			}
			if len(args) == 1 {
				if err := wire.CheckLockName(args[0]); err != nil {
					return cli.Usagef("bad lock name %q: %v", args[0], err)
				}
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			lock := ""
			if len(args) == 1 {
				lock = args[0]
				if err := refuseName(g, lock); err != nil {
					return err
				}
			}
			sigCtx, _, stop := signals()
			defer stop()
			ctx, cancel := context.WithTimeout(sigCtx, timeout)
			defer cancel()
			c, err := dialObserver(ctx, g)
			if err != nil {
				return fail(err)
			}
			defer leave(c)
			st, err := c.Status(ctx, lock)
			if err != nil {
				return fail(err)
			}
			// What ends within 30 days goes to standard error, in both
			// forms, so a JSON reader is not disturbed.
			for _, n := range expiring(g, time.Now()) {
				fmt.Fprintf(std.err, "note: %s\n", n)
			}
			if asJSON {
				enc := json.NewEncoder(std.out)
				enc.SetIndent("", "  ")
				return fail(enc.Encode(cli.StatusJSON(st)))
			}
			cli.PrintStatus(std.out, st)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up after this long")
	return cmd
}

// dialObserver connects as an observer (docs/protocol.md change 32) with the
// user's identity, or, on an open cluster where the identity file does not
// exist yet, with a throwaway key (nothing is created for a look).
func dialObserver(ctx context.Context, g *globals) (*bq.Client, error) {
	cl, err := certs.LoadCluster(g.cluster)
	if err != nil {
		return nil, err
	}
	epochs, err := certs.ReadEpochs(filepath.Dir(g.cluster))
	if err != nil {
		return nil, err
	}
	cfg := bq.Config{Cluster: cl, Epochs: epochs, IdentityFile: g.identity, Observe: true}
	if _, err := os.Stat(g.identity); errors.Is(err, fs.ErrNotExist) {
		if cl.Closed() {
			return nil, &failure{Code: exitNotPermitted, Msg: fmt.Sprintf(
				"cluster %q is closed: looking needs an enrolled identity, and there is none at %s (give one with --identity or BQ_IDENTITY; an operator on a server machine can use bqserver status --dir DIR)",
				cl.Name, g.identity)}
		}
		cfg.IdentityFile = "" // open cluster: a throwaway key
	}
	c, err := bq.Dial(ctx, cfg)
	if err == nil {
		g.dialed = c
	}
	return c, err
}

// expiring lists the certificates this client depends on that end within
// 30 days (certs.Expiring): the cluster's, as of the epochs beside the
// cluster file, and, on a closed cluster, its identity's admission
// certificate.
func expiring(g *globals, now time.Time) []string {
	cl, err := certs.LoadCluster(g.cluster)
	if err != nil {
		return nil
	}
	var adm *wire.AdmissionBody
	if id, err := certs.LoadIdentity(g.identity); err == nil && id.Admission != nil && cl.Closed() {
		adm, _ = wire.VerifyAdmission(cl.ClientCA, cl.ID(), *id.Admission)
	}
	chain, _, err := cl.ChainIn(filepath.Dir(g.cluster))
	if err != nil {
		chain = nil // the epochs beside the file do not load: the cluster file's view
	}
	return certs.Expiring(cl, chain, adm, now)
}
