package manager

import (
	"github.com/kplane/kplane/controller"
)

// Registry lists every controller the manager can run, one entry each, in start order.
var Registry = []controller.Entry{}
