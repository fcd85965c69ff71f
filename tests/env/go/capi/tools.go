//go:build tools

// Package tools pins the command built from this module.
package tools

import _ "sigs.k8s.io/cluster-api"
