package main

import (
	"github.com/kplane/kplane/node"
	"github.com/spf13/cobra"
)

func newNodeCommand() *cobra.Command {
	o := node.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Register a Node and run the pods bound to it as local processes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			return node.Run(ctx, o)
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}
