// Command kplane runs the roles of a compact Kubernetes control plane: `kplane apiserver`,
// `kplane version`, and (as they land) the controller manager, proxy, node agent and `up`.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	var verbosity int
	root := &cobra.Command{
		Use:           "kplane",
		Short:         "A compact Kubernetes control plane",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(*cobra.Command, []string) {
			level := slog.LevelInfo
			if verbosity > 0 {
				level = slog.LevelDebug
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
		},
	}
	root.PersistentFlags().IntVarP(&verbosity, "v", "v", 0, "log verbosity (0 = info, 1+ = debug)")
	root.AddCommand(newAPIServerCommand(), newControllerManagerCommand(), newProxyCommand(), newSchedulerCommand(), newNodeCommand(), newEchoCommand(), newUpCommand(), newVersionCommand())
	return root
}

// signalContext is cancelled on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
