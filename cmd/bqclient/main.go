// Command bqclient takes, releases and inspects bq locks.
//
//	bqclient [--cluster FILE] [--identity FILE] COMMAND ...
//
// Run `bqclient --help` for the commands and `bqclient COMMAND --help` for
// each one's flags; the exit codes are in exit.go.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/cmd/internal/cli"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

// globals are the flags every command takes, before or after its name.
type globals struct {
	cluster, identity string
	identityDefault   bool // --identity was neither given nor set in BQ_IDENTITY
	// dialed is the client the command connected with, if it did: once
	// the command ends, whether its epochs were out of date is said.
	dialed *bq.Client
}

// sayOutOfDate says, once the command is done, that the cluster file and
// the epochs beside it are of an older epoch than the servers showed
// (issue 44): the command still worked, but the next may not.
func (g *globals) sayOutOfDate(stderr io.Writer) {
	if g.dialed == nil {
		return
	}
	if started, now := g.dialed.Epochs(); now > started {
		fmt.Fprintf(stderr, "bqclient: %s and the epochs beside it are epoch %d, the cluster is at epoch %d: copy epochs/ from the cluster directory beside %s (once no server of epoch %d runs, this file finds no server)\n",
			g.cluster, started, now, g.cluster, started)
	}
}

// io is where a command reads and writes (tests pass buffers).
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == superviseArg {
		return supervise(args[1:])
	}
	root, g := newRoot(stdio{in: stdin, out: stdout, err: stderr})
	code := cli.Execute(root, args, stderr)
	g.sayOutOfDate(stderr)
	return code
}

func newRoot(std stdio) (*cobra.Command, *globals) {
	g := &globals{}
	root := &cobra.Command{
		Use:   "bqclient",
		Short: "Take, release and inspect bq locks; elect leaders",
		Long: `bqclient takes, releases and inspects the locks of a bq cluster: a lock service that stays
correct when up to f of its n servers, and any number of its clients, are malicious.

It needs the cluster's file (--cluster, or BQ_CLUSTER) and a client identity, a signing key
(--identity, or BQ_IDENTITY; made on first use). Give every client program its own identity.`,
		Version: cli.Version("bqclient"),
	}
	root.SetVersionTemplate("{{.Version}}")
	root.SetOut(std.out)
	root.SetErr(std.err)
	root.SetIn(std.in)
	root.SetUsageTemplate(root.UsageTemplate() + exitCodesHelp)
	pf := root.PersistentFlags()
	pf.StringVar(&g.cluster, "cluster", envOr("BQ_CLUSTER", "cluster.yaml"), "the cluster file (BQ_CLUSTER)")
	pf.StringVar(&g.identity, "identity", os.Getenv("BQ_IDENTITY"), "this client's key; made on first use (BQ_IDENTITY; default ~/.config/bq/identity.key)")
	root.PersistentPreRun = func(*cobra.Command, []string) {
		if g.identity == "" {
			g.identity, g.identityDefault = defaultIdentity(), true
		}
	}
	root.AddCommand(lockCmd(g, std), unlockCmd(g, std), electCmd(g, std), statusCmd(g, std), agentCmd(g, std), keygenCmd(g, std), versionCmd(std))
	return root, g
}

func versionCmd(std stdio) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of bqclient, its commit, Go and the protocol",
		Args:  cli.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprint(std.out, cli.Version("bqclient"))
			return nil
		},
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func defaultIdentity() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "bq-identity.key"
	}
	return filepath.Join(dir, "bq", "identity.key")
}

// trimBQ drops the SDK's "bq: " prefix: the command names itself.
func trimBQ(s string) string { return strings.TrimPrefix(s, "bq: ") }
