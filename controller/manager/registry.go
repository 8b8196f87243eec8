package manager

import (
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/controller/endpoints"
)

// Registry lists every controller the manager can run, one entry each, in start order.
var Registry = []controller.Entry{
	endpoints.Entry,
}
