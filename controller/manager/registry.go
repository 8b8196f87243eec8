package manager

import (
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/controller/cronjob"
	"github.com/kplane/kplane/controller/daemonset"
	"github.com/kplane/kplane/controller/deployment"
	"github.com/kplane/kplane/controller/disruption"
	"github.com/kplane/kplane/controller/endpoints"
	"github.com/kplane/kplane/controller/endpointslice"
	"github.com/kplane/kplane/controller/garbagecollector"
	"github.com/kplane/kplane/controller/job"
	"github.com/kplane/kplane/controller/namespace"
	"github.com/kplane/kplane/controller/nodelifecycle"
	"github.com/kplane/kplane/controller/podautoscaler"
	"github.com/kplane/kplane/controller/podgc"
	"github.com/kplane/kplane/controller/replicaset"
	"github.com/kplane/kplane/controller/resourcequota"
	"github.com/kplane/kplane/controller/rootcacertpublisher"
	"github.com/kplane/kplane/controller/serviceaccount"
	"github.com/kplane/kplane/controller/serviceaccounttoken"
	"github.com/kplane/kplane/controller/servicelb"
	"github.com/kplane/kplane/controller/statefulset"
	"github.com/kplane/kplane/controller/ttlafterfinished"
	"github.com/kplane/kplane/controller/volume/persistentvolume"
	"github.com/kplane/kplane/controller/volume/protection"
)

// Registry lists every controller the manager can run, one entry each, in start order.
var Registry = []controller.Entry{
	endpoints.Entry,
	endpointslice.Entry,
	namespace.Entry,
	serviceaccount.Entry,
	serviceaccounttoken.Entry,
	rootcacertpublisher.Entry,
	podgc.Entry,
	nodelifecycle.Entry,
	replicaset.ReplicaSetEntry,
	replicaset.ReplicationControllerEntry,
	deployment.Entry,
	job.Entry,
	cronjob.Entry,
	ttlafterfinished.Entry,
	daemonset.Entry,
	statefulset.Entry,
	disruption.Entry,
	podautoscaler.Entry,
	persistentvolume.Entry,
	protection.PVCEntry,
	protection.PVEntry,
	servicelb.Entry,
	resourcequota.Entry,
	garbagecollector.Entry,
}
