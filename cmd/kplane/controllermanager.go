package main

import (
	"github.com/kplane/kplane/controller/manager"
	"github.com/spf13/cobra"
)

func newControllerManagerCommand() *cobra.Command {
	o := manager.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "controller-manager",
		Short: "Run the controllers of kube-controller-manager that kplane has against an API server",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			return manager.Run(ctx, o)
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}
