package remoting

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Body types a NameServer reads and writes, with fastjson's field order and
// RocketMQ's JSON names. Encoders append to dst; decoders accept both
// dialects and ignore unknown fields.

// DataVersion is a broker's topic-table version (DataVersion.java). Two are
// equal when all three fields are.
type DataVersion struct {
	Counter      int64 `json:"counter"`
	StateVersion int64 `json:"stateVersion"`
	Timestamp    int64 `json:"timestamp"`
}

// AppendJSON appends v as 5.x writes it (4.9 has no stateVersion).
func (v DataVersion) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"counter":`...)
	dst = appendInt(dst, v.Counter)
	dst = append(dst, `,"stateVersion":`...)
	dst = appendInt(dst, v.StateVersion)
	dst = append(dst, `,"timestamp":`...)
	dst = appendInt(dst, v.Timestamp)
	return append(dst, '}')
}

// DecodeDataVersion decodes a DataVersion body (4.9 or 5.x).
func DecodeDataVersion(b []byte) (DataVersion, error) {
	var v DataVersion
	if err := decodeJSON(b, &v, "DataVersion"); err != nil {
		return DataVersion{}, err
	}
	return v, nil
}

// QueueData is one broker group's queues of a topic.
type QueueData struct {
	BrokerName     string `json:"brokerName"`
	ReadQueueNums  int32  `json:"readQueueNums"`
	WriteQueueNums int32  `json:"writeQueueNums"`
	Perm           int32  `json:"perm"`
	TopicSysFlag   int32  `json:"topicSysFlag"`
}

// QueueNums is an edgereg queue count as RocketMQ's int holds it: counts
// past Integer.MAX_VALUE (a QUIC broker may register up to 2^32-1) are
// capped there, not wrapped negative.
func QueueNums(n uint32) int32 { return int32(min(n, math.MaxInt32)) }

func (q *QueueData) appendJSON(dst []byte, d Dialect) []byte {
	dst = append(dst, `{"brokerName":`...)
	dst = appendString(dst, q.BrokerName, d)
	dst = append(dst, `,"perm":`...)
	dst = appendInt(dst, int64(q.Perm))
	dst = append(dst, `,"readQueueNums":`...)
	dst = appendInt(dst, int64(q.ReadQueueNums))
	dst = append(dst, `,"topicSysFlag":`...)
	dst = appendInt(dst, int64(q.TopicSysFlag))
	dst = append(dst, `,"writeQueueNums":`...)
	dst = appendInt(dst, int64(q.WriteQueueNums))
	return append(dst, '}')
}

// BrokerData is one broker group: its addresses by broker id (MasterID for
// the master).
type BrokerData struct {
	Cluster            string           `json:"cluster"`
	BrokerName         string           `json:"brokerName"`
	BrokerAddrs        map[int64]string `json:"brokerAddrs"`
	EnableActingMaster bool             `json:"enableActingMaster"`
	ZoneName           string           `json:"zoneName"` // omitted when empty
}

// appendBrokerAddrs writes the map in ascending id order, which is both
// fastjson's MapSortField order and Java's HashMap order for small ids. It is
// always an object, never null: rocketmq-client-go panics on a missing one.
func appendBrokerAddrs(dst []byte, addrs map[int64]string, d Dialect) []byte {
	ids := make([]int64, 0, len(addrs))
	for id := range addrs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	dst = append(dst, '{')
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		if d == Standard {
			dst = append(dst, '"')
			dst = appendInt(dst, id)
			dst = append(dst, '"')
		} else {
			dst = appendInt(dst, id)
		}
		dst = append(dst, ':')
		dst = appendString(dst, addrs[id], d)
	}
	return append(dst, '}')
}

func (b *BrokerData) appendJSON(dst []byte, d Dialect) []byte {
	dst = append(dst, `{"brokerAddrs":`...)
	dst = appendBrokerAddrs(dst, b.BrokerAddrs, d)
	dst = append(dst, `,"brokerName":`...)
	dst = appendString(dst, b.BrokerName, d)
	dst = append(dst, `,"cluster":`...)
	dst = appendString(dst, b.Cluster, d)
	dst = append(dst, `,"enableActingMaster":`...)
	dst = appendBool(dst, b.EnableActingMaster)
	if b.ZoneName != "" {
		dst = append(dst, `,"zoneName":`...)
		dst = appendString(dst, b.ZoneName, d)
	}
	return append(dst, '}')
}

// TopicRouteData is the answer to GET_ROUTEINFO_BY_TOPIC.
type TopicRouteData struct {
	// OrderTopicConf is "brokerA:4;brokerB:4" for ordered topics; omitted
	// when empty.
	OrderTopicConf    string              `json:"orderTopicConf"`
	QueueDatas        []QueueData         `json:"queueDatas"`
	BrokerDatas       []BrokerData        `json:"brokerDatas"`
	FilterServerTable map[string][]string `json:"filterServerTable"`
	// TopicQueueMappingByBroker is static-topic data (5.x), kept as raw
	// JSON; omitted when nil.
	TopicQueueMappingByBroker json.RawMessage `json:"topicQueueMappingByBroker"`
}

// AppendJSON appends t in dialect d. queueDatas and brokerDatas are always
// written (rocketmq-client-go fails on a missing queueDatas), as is
// filterServerTable.
func (t *TopicRouteData) AppendJSON(dst []byte, d Dialect) []byte {
	dst = append(dst, `{"brokerDatas":[`...)
	for i := range t.BrokerDatas {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = t.BrokerDatas[i].appendJSON(dst, d)
	}
	dst = append(dst, `],"filterServerTable":{`...)
	for i, k := range sortedKeys(t.FilterServerTable) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, k, d)
		dst = append(dst, ':')
		dst = appendStrings(dst, t.FilterServerTable[k], d)
	}
	dst = append(dst, '}')
	if t.OrderTopicConf != "" {
		dst = append(dst, `,"orderTopicConf":`...)
		dst = appendString(dst, t.OrderTopicConf, d)
	}
	dst = append(dst, `,"queueDatas":[`...)
	for i := range t.QueueDatas {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = t.QueueDatas[i].appendJSON(dst, d)
	}
	dst = append(dst, ']')
	if len(t.TopicQueueMappingByBroker) > 0 {
		dst = append(dst, `,"topicQueueMappingByBroker":`...)
		dst = append(dst, t.TopicQueueMappingByBroker...)
	}
	return append(dst, '}')
}

// Encode returns t as a body in dialect d.
func (t *TopicRouteData) Encode(d Dialect) []byte { return t.AppendJSON(nil, d) }

// DecodeTopicRouteData decodes a route body of either dialect.
func DecodeTopicRouteData(b []byte) (*TopicRouteData, error) {
	t := &TopicRouteData{}
	if err := decodeJSON(QuoteBareKeys(b), t, "TopicRouteData"); err != nil {
		return nil, err
	}
	return t, nil
}

// ClusterInfo is the answer to GET_BROKER_CLUSTER_INFO: every broker group
// by name and the group names of every cluster.
type ClusterInfo struct {
	BrokerAddrTable  map[string]BrokerData `json:"brokerAddrTable"`
	ClusterAddrTable map[string][]string   `json:"clusterAddrTable"`
}

// AppendJSON appends c in dialect d; RocketMQ always writes Legacy. Map keys
// and each cluster's group names are sorted.
func (c *ClusterInfo) AppendJSON(dst []byte, d Dialect) []byte {
	dst = append(dst, `{"brokerAddrTable":{`...)
	for i, name := range sortedKeys(c.BrokerAddrTable) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, name, d)
		dst = append(dst, ':')
		bd := c.BrokerAddrTable[name]
		dst = bd.appendJSON(dst, d)
	}
	dst = append(dst, `},"clusterAddrTable":{`...)
	for i, cluster := range sortedKeys(c.ClusterAddrTable) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, cluster, d)
		dst = append(dst, ':')
		dst = appendStrings(dst, slices.Sorted(slices.Values(c.ClusterAddrTable[cluster])), d)
	}
	return append(dst, '}', '}')
}

// Encode returns c as a body in dialect d.
func (c *ClusterInfo) Encode(d Dialect) []byte { return c.AppendJSON(nil, d) }

// DecodeClusterInfo decodes a cluster-info body of either dialect.
func DecodeClusterInfo(b []byte) (*ClusterInfo, error) {
	c := &ClusterInfo{}
	if err := decodeJSON(QuoteBareKeys(b), c, "ClusterInfo"); err != nil {
		return nil, err
	}
	return c, nil
}

// BrokerMemberGroup is the answer body of GET_BROKER_MEMBER_GROUP (5.x
// GetBrokerMemberGroupResponseBody), always written Legacy by RocketMQ.
type BrokerMemberGroup struct {
	Cluster     string           `json:"cluster"`
	BrokerName  string           `json:"brokerName"`
	BrokerAddrs map[int64]string `json:"brokerAddrs"`
}

// AppendJSON appends {"brokerMemberGroup":{…}} in dialect d.
func (g *BrokerMemberGroup) AppendJSON(dst []byte, d Dialect) []byte {
	dst = append(dst, `{"brokerMemberGroup":{"brokerAddrs":`...)
	dst = appendBrokerAddrs(dst, g.BrokerAddrs, d)
	dst = append(dst, `,"brokerName":`...)
	dst = appendString(dst, g.BrokerName, d)
	dst = append(dst, `,"cluster":`...)
	dst = appendString(dst, g.Cluster, d)
	return append(dst, '}', '}')
}

// DecodeBrokerMemberGroup decodes a GetBrokerMemberGroupResponseBody.
func DecodeBrokerMemberGroup(b []byte) (*BrokerMemberGroup, error) {
	var w struct {
		BrokerMemberGroup *BrokerMemberGroup `json:"brokerMemberGroup"`
	}
	if err := decodeJSON(QuoteBareKeys(b), &w, "GetBrokerMemberGroupResponseBody"); err != nil {
		return nil, err
	}
	if w.BrokerMemberGroup == nil {
		return &BrokerMemberGroup{}, nil
	}
	return w.BrokerMemberGroup, nil
}

// TopicList is the answer to the topic-list codes. BrokerAddr is set only by
// GET_SYSTEM_TOPIC_LIST_FROM_NS. It is strict JSON: rocketmq-client-go reads
// it with encoding/json.
type TopicList struct {
	TopicList  []string `json:"topicList"`
	BrokerAddr string   `json:"brokerAddr"`
}

// TopicListResponse is the SUCCESS answer to req, a topic-list code, with
// list as its body (an empty array for none) and brokerAddr when set, as a
// NameServer answers it.
func TopicListResponse(req *Command, list []string, brokerAddr string) *Command {
	if list == nil {
		list = []string{}
	}
	resp := NewResponse(req, Success, "")
	resp.Body = (&TopicList{TopicList: list, BrokerAddr: brokerAddr}).Encode()
	return resp
}

// AppendJSON appends l; topicList is always an array.
func (l *TopicList) AppendJSON(dst []byte) []byte {
	dst = append(dst, '{')
	if l.BrokerAddr != "" {
		dst = append(dst, `"brokerAddr":`...)
		dst = appendString(dst, l.BrokerAddr, Legacy)
		dst = append(dst, ',')
	}
	dst = append(dst, `"topicList":`...)
	dst = appendStrings(dst, l.TopicList, Legacy)
	return append(dst, '}')
}

// Encode returns l as a body.
func (l *TopicList) Encode() []byte { return l.AppendJSON(nil) }

// DecodeTopicList decodes a topic-list body.
func DecodeTopicList(b []byte) (*TopicList, error) {
	l := &TopicList{}
	if err := decodeJSON(b, l, "TopicList"); err != nil {
		return nil, err
	}
	return l, nil
}

// KVTable is a KV namespace (GET_KVLIST_BY_NAMESPACE; the
// ORDER_TOPIC_CONFIG namespace in a REGISTER_BROKER answer).
type KVTable struct {
	Table map[string]string `json:"table"`
}

// AppendJSON appends {"table":{…}} with sorted keys; an empty table is {}.
func (t *KVTable) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"table":`...)
	dst = appendStringMap(dst, t.Table, Legacy)
	return append(dst, '}')
}

// Encode returns t as a body.
func (t *KVTable) Encode() []byte { return t.AppendJSON(nil) }

// DecodeKVTable decodes a KVTable body.
func DecodeKVTable(b []byte) (*KVTable, error) {
	t := &KVTable{}
	if err := decodeJSON(b, t, "KVTable"); err != nil {
		return nil, err
	}
	return t, nil
}

// decodeFastjson is decodeJSON for a body fastjson wrote with its defaults,
// where a map with integer keys has them bare ({0:0}): such as a 5.x
// broker's TopicQueueMappingInfo (its currIdMap) in REGISTER_BROKER. Only a
// body that fails as JSON is rewritten (QuoteBareKeys) and decoded again, so
// the common body is neither copied nor scanned twice.
func decodeFastjson(b []byte, v any, what string) error {
	err := decodeJSON(b, v, what)
	if err == nil {
		return nil
	}
	var syntax *json.SyntaxError
	if !errors.As(err, &syntax) {
		return err
	}
	if quoted := QuoteBareKeys(b); !bytes.Equal(quoted, b) && decodeJSON(quoted, v, what) == nil {
		return nil
	}
	return err
}

// decodeJSON decodes one JSON value and nothing after it.
func decodeJSON(b []byte, v any, what string) error {
	if isJSONSpace(b) {
		return fmt.Errorf("%w: empty %s body", ErrMalformed, what)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %s body: %w", ErrMalformed, what, err)
	}
	return nil
}
