//go:build tools

// Package tools pins the command built from this module.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
