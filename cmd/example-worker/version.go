package main

// version and revision name the build. Release builds (make image, the
// Dockerfile's binaries) stamp them with
// -ldflags "-X main.version=v0.1.0 -X main.revision=<git commit>".
var (
	version  = "dev"
	revision = "unknown"
)
