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

// exitCodes says, for each command (by its path), the exit codes it can
// end with: 0, 1 and 2 for all, and what it adds. Each --help lists only
// its command's own (issue 55: 'dev --help' listed exit 5 of 'server add').
func exitCodes(path string) string {
	usage := "usage: a mistake on the command line"
	var five, nine string
	switch path {
	case "bqserver":
		five = "too few servers answered ('server', 'ca', 'client revoke' and 'status': their --help says when)"
	case "bqserver run":
		usage += ", or in the settings file (server.yaml, --config)"
		nine = "the server's store failed: its disk changed what it stored (it wrote server-I/CORRUPT:\n" +
			"     replace it), an fdatasync failed, or an I/O error; it stopped before saying anything wrong"
	case "bqserver server add", "bqserver server remove", "bqserver server replace", "bqserver server push",
		"bqserver ca rotate", "bqserver ca rotate-clients", "bqserver ca retire-clients", "bqserver ca rotate-operator":
		five = "too few servers answered: fewer than must endorse the change (nothing was signed; --force\n" +
			"     proposes it anyway), or fewer than a quorum took it (it is written: run\n" +
			"     'bqserver server push' when they are up)"
	case "bqserver server list", "bqserver status":
		five = "fewer than a quorum of the members answered"
	case "bqserver client revoke":
		five = "fewer than a quorum of the servers acknowledged the revocation within --timeout (it is\n" +
			"     recorded: run the command again when they are up)"
	}
	out := "\nExit codes:\n  0  ok (also after SIGINT or SIGTERM)\n  1  error\n  2  " + usage + "\n"
	if five != "" {
		out += "  5  " + five + "\n"
	}
	if nine != "" {
		out += "  9  " + nine + "\n"
	}
	return out
}

// setExitCodes gives cmd and every command under it the usage template
// that ends with its own exit codes.
func setExitCodes(cmd *cobra.Command, template string) {
	cmd.SetUsageTemplate(template + exitCodes(cmd.CommandPath()))
	for _, sub := range cmd.Commands() {
		setExitCodes(sub, template)
	}
}

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
	root.AddCommand(initCmd(stdout, stderr), runCmd(stderr), devCmd(stdout, stderr), clientCmd(stdout, stderr), serverCmd(stdout), caCmd(stdout), settingsCmd(stdout), statusCmd(stdout), &cobra.Command{
		Use:   "version",
		Short: "Print the version of bqserver, its commit, Go and the protocol",
		Args:  cli.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := io.WriteString(stdout, cli.Version("bqserver"))
			return err
		},
	})
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	setExitCodes(root, root.UsageTemplate())
	return cli.Execute(root, args, stderr)
}
