// Package remotingtest holds tests of an edgereg node's RocketMQ remoting
// listener with the real rocketmq-client-go library. They are behind the
// build tag rocketmq and run without the race detector, because the library
// itself races (Shutdown against its rebalance goroutines), and it leaves
// goroutines behind after Shutdown:
//
//	go test -tags rocketmq -count=1 ./node/remotingtest
//
// The library is a test dependency only: nothing outside this package's
// test files imports it, so it is not in the edgereg binary.
package remotingtest
