//go:build tools

// Package tools pins the commands built from this module: the operator and its
// Ironic provisioner plugin, which must come from one module graph to load.
package tools

import (
	_ "github.com/metal3-io/baremetal-operator"
	_ "github.com/metal3-io/baremetal-operator/pkg/provisioner/ironic/plugin"
)
