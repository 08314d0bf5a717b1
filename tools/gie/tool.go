//go:build tools

// Package tools pins the Gateway API Inference Extension's module (GIE_VERSION in
// tools/versions.env) for hack/cluster-tools.sh, which copies its CRDs and compiles nothing. The
// blank import (never built: the tag) keeps `go mod tidy` (cluster-tools.sh --pin) from dropping
// the requirement, which no other package of this module uses.
package tools

import _ "sigs.k8s.io/gateway-api-inference-extension/api/v1"
