package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/runtime/docker"
	"github.com/splitbrain/splitbrain/runtime/images"
)

func newImagesCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "images", Short: "Build splitbrain's container images (no registry needed)"}
	var roles []string
	build := &cobra.Command{
		Use:   "build",
		Short: "Build missing images: a Debian base by debootstrap (needs root), then one image per role",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if len(roles) == 0 {
				roles = images.Roles()
			}
			if _, err := images.PlanRoles(roles); err != nil {
				return &usageError{fmt.Errorf("--roles: %w", err)}
			}
			cli, err := docker.Connect(cmd.Context())
			if err != nil {
				return err
			}
			defer cli.Close()
			b := images.NewBuilder(cli, log)
			b.Progress = cmd.ErrOrStderr()
			tags, err := b.Ensure(cmd.Context(), roles)
			if err != nil {
				return err
			}
			for _, r := range roles {
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\n", r, tags[r])
			}
			return nil
		},
	}
	// The default is resolved when the command runs: the roles registered
	// by then (a user's adapter registers its own), not those of the
	// moment the command is made, so the generated reference stays the same.
	build.Flags().StringSliceVar(&roles, "roles", nil, "roles to build (default: every registered role)")
	cmd.AddCommand(build)
	return cmd
}
