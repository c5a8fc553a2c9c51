package nodetest_test

import (
	"github.com/limitd/limitd/service"
	"github.com/limitd/limitd/service/nodetest"
)

// A Node is a service.Node: the fake names every capability the service uses.
var _ service.Node = (*nodetest.Node)(nil)
