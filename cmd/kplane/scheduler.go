package main

import (
	"github.com/kplane/kplane/scheduler"
	"github.com/spf13/cobra"
)

func newSchedulerCommand() *cobra.Command {
	o := scheduler.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Bind pods that name no node to ready, schedulable nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			return scheduler.Run(ctx, o)
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}
