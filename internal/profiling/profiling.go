// Package profiling serves Go's profiles at /debug/pprof/ for the roles' --profiling flags
// (apiserver, controller manager, proxy), as Kubernetes' components serve them.
package profiling

import (
	"net/http"
	"net/http/pprof"
	"strings"
)

// Handler answers /debug/pprof/...: the index, and each profile by name. Mount it at
// "/debug/pprof/".
var Handler http.Handler = http.HandlerFunc(serve)

func serve(w http.ResponseWriter, r *http.Request) {
	switch name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/"); name {
	case "cmdline":
		pprof.Cmdline(w, r)
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "trace":
		pprof.Trace(w, r)
	default:
		pprof.Index(w, r)
	}
}
