package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/bq-lock/bq/cmd/internal/cli"
	"github.com/bq-lock/bq/wire"
)

func unlockCmd(g *globals, std stdio) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "unlock NAME",
		Short: "Release this identity's holding or attempt on a lock (e.g. a detached one)",
		Long: `Release what this identity holds or waits for on the lock NAME: a holding left by
'lock --detach', or one a crashed process left behind before its lease ran out.`,
		Example: `  bqclient lock deploy --detach --ttl 5m && ./deploy.sh; bqclient unlock deploy`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return cli.Usagef("need exactly one lock NAME")
			}
			if err := wire.CheckLockName(args[0]); err != nil {
				return cli.Usagef("bad lock name %q: %v", args[0], err)
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			if err := refuseName(g, args[0]); err != nil {
				return err
			}
			sigCtx, _, stop := signals()
			defer stop()
			ctx, cancel := context.WithTimeout(sigCtx, timeout)
			defer cancel()
			unlockIdentity, err := lockIdentity(ctx, g.identity, false, std.err)
			if err != nil {
				return fail(err)
			}
			defer unlockIdentity()
			c, err := dial(ctx, g, nil, false, std.err)
			if err != nil {
				return fail(err)
			}
			defer leave(c)
			released, err := c.Release(ctx, args[0])
			if err != nil {
				return fail(err)
			}
			if released {
				fmt.Fprintf(std.out, "released %s\n", args[0])
			} else {
				fmt.Fprintf(std.out, "%s: this identity holds nothing there\n", args[0])
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "give up after this long")
	return cmd
}
