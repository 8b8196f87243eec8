package apiserver

import (
	"net/http"
	"net/http/pprof"
	"strings"
)

// servePprof answers /debug/pprof/...: the index, and each profile by name, as kube-apiserver
// serves them with --profiling.
func servePprof(w http.ResponseWriter, r *http.Request) {
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
