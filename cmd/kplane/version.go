package main

import (
	"fmt"
	"runtime"

	"github.com/kplane/kplane/apiserver"
	"github.com/spf13/cobra"
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print kplane's version and the Kubernetes API version it serves",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "kplane %s (Kubernetes API %s, %s, %s/%s)\n",
				apiserver.Version, apiserver.KubernetesVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}
