package manager

import (
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/controller/endpoints"
	"github.com/kplane/kplane/controller/endpointslice"
)

// Registry lists every controller the manager can run, one entry each, in start order.
var Registry = []controller.Entry{
	endpoints.Entry,
	endpointslice.Entry,
}
