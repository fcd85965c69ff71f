//go:build tools

// Package tools pins the command built from this module.
package tools

import _ "github.com/metal3-io/baremetal-operator"
