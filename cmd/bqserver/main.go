// Command bqserver runs a bq lock server, makes a cluster's keys and
// certificates, or runs a whole local cluster for development.
//
//	bqserver init --dir DIR --servers N [--f F] [--host H] [--port-base P] [--scheme S]
//	bqserver run  --dir DIR --id I
//	bqserver dev  [--dir DIR] [--servers 4] [--processes]
//	bqserver client add|list|revoke ...   (a closed cluster's clients)
//	bqserver server list --dir DIR [--json]   (members, state, expiry dates)
//	bqserver status --dir DIR [LOCK]
//
// Run `bqserver COMMAND --help` for a command's flags.
package main

import (
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/bq-lock/bq/cmd/internal/cli"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const exitCodesHelp = `
Exit codes:
  0  ok (also after SIGINT or SIGTERM)
  1  error
  2  usage: a mistake on the command line
  5  too few servers answered: a change ('server add', 'remove', 'replace', 'push', 'ca ...') is
     written but not yet taken by a quorum (run 'bqserver server push' when they are up), or
     'server list' and 'status' found fewer than a quorum of the members answering
`

func run(args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:   "bqserver",
		Short: "The bq lock server",
		Long: `bqserver runs a server of a bq cluster: n ≥ 3f+1 servers that stay correct with up to f of them,
and any number of clients, malicious. 'init' makes a cluster's keys and certificates, 'run' runs one
server, 'dev' a whole local cluster for trying bq out.`,
		Version: cli.Version("bqserver"),
	}
	root.SetVersionTemplate("{{.Version}}")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetUsageTemplate(root.UsageTemplate() + exitCodesHelp)
	root.AddCommand(initCmd(stdout, stderr), runCmd(stderr), devCmd(stdout, stderr), clientCmd(stdout, stderr), serverCmd(stdout), caCmd(stdout), settingsCmd(stdout), statusCmd(stdout), &cobra.Command{
		Use:   "version",
		Short: "Print the version of bqserver, its commit, Go and the protocol",
		Args:  cli.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := io.WriteString(stdout, cli.Version("bqserver"))
			return err
		},
	})
	return cli.Execute(root, args, stderr)
}
