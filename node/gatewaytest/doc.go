// Package gatewaytest holds end-to-end tests of the edge gateway
// (wire/gateway) with the real RocketMQ Go client library,
// github.com/apache/rocketmq-client-go/v2, against real nodes. It has no
// code of its own.
//
// The tests live here, not in wire/gateway, because they run nodes
// (node/nodetest) and the client library together, and the library is a
// test dependency this package alone pulls in. They are behind the build
// tag rocketmq and run without -race: the library itself races (its
// Shutdown against its rebalance goroutines), which -race would report as
// a failure of ours. `make test` runs them as a separate target:
//
//	go test -tags rocketmq -count=1 -timeout 5m ./node/remotingtest ./node/gatewaytest
//
// Everything the gateway does itself is covered under -race by
// wire/gateway's own tests.
package gatewaytest
