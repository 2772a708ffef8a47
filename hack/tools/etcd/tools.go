//go:build tools

// Package etcd pins the etcd server built for tests and the demo.
package etcd

import _ "go.etcd.io/etcd/server/v3"
