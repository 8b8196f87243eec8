package endpointslice

import (
	"fmt"
	"os"
	"testing"

	"github.com/kplane/kplane/internal/testserver"
)

// testServerURL is the apiserver the integration tests share; each test works in its own
// namespace and runs its own controller (one at a time: two controllers over one cluster would
// fight over the same Services).
var testServerURL string

func TestMain(m *testing.M) {
	srv, err := testserver.Start(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the test apiserver:", err)
		os.Exit(1)
	}
	testServerURL = srv.URL
	code := m.Run()
	if err := srv.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the test apiserver:", err)
	}
	os.Exit(code)
}
