//go:build tools

// Package tools pins the command and the API types used from this module.
package tools

import (
	_ "github.com/metal3-io/ip-address-manager/api/v1alpha1"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
