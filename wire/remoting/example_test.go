package remoting_test

import (
	"bytes"
	"fmt"

	"github.com/edgereg/edgereg/wire/remoting"
)

// A route request from rocketmq-client-go, answered as a NameServer does:
// the client's version 317 gets the legacy brokerAddrs dialect.
func Example() {
	req := &remoting.Command{Code: remoting.GetRouteInfoByTopic, Language: "GO", Version: remoting.V4_5_2,
		Opaque: 1, ExtFields: map[string]string{"topic": "TopicTest"}}
	frame, _ := req.Encode()

	got, _ := remoting.ReadCommand(bytes.NewReader(frame), remoting.DefaultMaxFrame)
	route := &remoting.TopicRouteData{
		BrokerDatas: []remoting.BrokerData{{Cluster: "DefaultCluster", BrokerName: "broker-a",
			BrokerAddrs: map[int64]string{remoting.MasterID: "127.0.0.1:10911"}}},
		QueueDatas: []remoting.QueueData{{BrokerName: "broker-a", ReadQueueNums: 4, WriteQueueNums: 4,
			Perm: remoting.PermRead | remoting.PermWrite}},
	}
	resp := remoting.NewResponse(got, remoting.Success, "")
	resp.Body = route.Encode(remoting.RouteDialect(got))
	fmt.Println(resp.Opaque, resp.IsResponse())
	fmt.Println(string(resp.Body))
	// Output:
	// 1 true
	// {"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}
}
