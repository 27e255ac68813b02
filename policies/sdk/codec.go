package sdk

import (
	"cmp"
	"slices"
)

// Field numbers are those of wasm/ABI.md; unknown fields are skipped so a
// newer host can add optional ones.

func decodeRouteInput(d *decoder) (in RouteInput) {
	d.fields(func(k uint64) {
		switch k {
		case 1:
			in.Client = decodeClient(d)
		case 2:
			in.Topic = d.text()
		case 3:
			in.Route = decodeRoute(d)
		case 4:
			in.NowMs = d.int()
		case 5:
			in.Rand = d.uint()
		default:
			d.skip()
		}
	})
	return in
}

func decodeClient(d *decoder) (c Client) {
	d.fields(func(k uint64) {
		switch k {
		case 1:
			c.Addr = d.text()
		case 2:
			c.Zone = d.text()
		case 3:
			n := d.length(majorMap)
			c.Labels = make(map[string]string, n)
			for range n {
				key := d.text()
				c.Labels[key] = d.text()
			}
		default:
			d.skip()
		}
	})
	return c
}

func decodeRoute(d *decoder) (r Route) {
	d.fields(func(k uint64) {
		switch k {
		case 1:
			r.Queues = make([]QueueData, d.length(majorArray))
			for i := range r.Queues {
				r.Queues[i] = decodeQueue(d)
			}
		case 2:
			r.Brokers = make([]BrokerData, d.length(majorArray))
			for i := range r.Brokers {
				r.Brokers[i] = decodeBroker(d)
			}
		default:
			d.skip()
		}
	})
	return r
}

func decodeQueue(d *decoder) (q QueueData) {
	d.fields(func(k uint64) {
		switch k {
		case 1:
			q.BrokerName = d.text()
		case 2:
			q.ReadQueues = uint32(d.uint())
		case 3:
			q.WriteQueues = uint32(d.uint())
		case 4:
			q.Perm = uint8(d.uint())
		case 5:
			q.SysFlag = uint32(d.uint())
		default:
			d.skip()
		}
	})
	return q
}

func decodeBroker(d *decoder) (b BrokerData) {
	d.fields(func(k uint64) {
		switch k {
		case 1:
			b.Cluster = d.text()
		case 2:
			b.Name = d.text()
		case 3:
			b.Zone = d.text()
		case 4:
			n := d.length(majorMap)
			b.Addrs = make(map[int64]string, n)
			for range n {
				id := d.int()
				b.Addrs[id] = d.text()
			}
		default:
			d.skip()
		}
	})
	return b
}

func encodeRoute(e *encoder, r *Route) {
	e.mapn(2)
	e.uint(1)
	e.array(len(r.Queues))
	for i := range r.Queues {
		encodeQueue(e, &r.Queues[i])
	}
	e.uint(2)
	e.array(len(r.Brokers))
	for i := range r.Brokers {
		encodeBroker(e, &r.Brokers[i])
	}
}

func encodeQueue(e *encoder, q *QueueData) {
	vals := [4]uint64{uint64(q.ReadQueues), uint64(q.WriteQueues), uint64(q.Perm), uint64(q.SysFlag)}
	n := 1
	for _, v := range vals {
		if v != 0 {
			n++
		}
	}
	e.mapn(n)
	e.uint(1)
	e.text(q.BrokerName)
	for i, v := range vals {
		if v != 0 {
			e.uint(uint64(i + 2))
			e.uint(v)
		}
	}
}

func encodeBroker(e *encoder, b *BrokerData) {
	n := 3
	if b.Zone != "" {
		n++
	}
	e.mapn(n)
	e.uint(1)
	e.text(b.Cluster)
	e.uint(2)
	e.text(b.Name)
	if b.Zone != "" {
		e.uint(3)
		e.text(b.Zone)
	}
	e.uint(4)
	ids := make([]int64, 0, len(b.Addrs))
	for id := range b.Addrs {
		ids = append(ids, id)
	}
	// Core deterministic order: by encoded key, so 0, 1, .. then -1, -2, ..
	slices.SortFunc(ids, func(a, b int64) int {
		switch {
		case (a < 0) != (b < 0):
			return cmp.Compare(b, a) // the non-negative one first
		case a < 0:
			return cmp.Compare(b, a)
		}
		return cmp.Compare(a, b)
	})
	e.mapn(len(ids))
	for _, id := range ids {
		e.int(id)
		e.text(b.Addrs[id])
	}
}

func decodeThresholdInput(d *decoder) (in ThresholdInput) {
	d.fields(func(k uint64) {
		switch k {
		case 1:
			in.Broker = decodeBrokerInfo(d)
		case 2:
			in.Stats = decodeStats(d)
		case 3:
			in.DefaultMs = d.int()
		case 4:
			in.NowMs = d.int()
		case 5:
			in.Rand = d.uint()
		case 6:
			in.MinMs = d.int()
		case 7:
			in.MaxMs = d.int()
		default:
			d.skip()
		}
	})
	return in
}

func decodeBrokerInfo(d *decoder) (b Broker) {
	d.fields(func(k uint64) {
		switch k {
		case 1:
			b.Cluster = d.text()
		case 2:
			b.Name = d.text()
		case 3:
			b.ID = d.int()
		case 4:
			b.Addr = d.text()
		case 5:
			b.Zone = d.text()
		default:
			d.skip()
		}
	})
	return b
}

func decodeStats(d *decoder) (s Stats) {
	d.fields(func(k uint64) {
		switch k {
		case 1:
			s.Heartbeats = d.uint()
		case 2:
			s.IntervalsMs = make([]int64, d.length(majorArray))
			for i := range s.IntervalsMs {
				s.IntervalsMs[i] = d.int()
			}
		case 3:
			s.MeanIntervalMs = d.int()
		case 4:
			s.JitterMs = d.int()
		case 5:
			s.RTTMs = d.int()
		case 6:
			s.LossPermille = uint32(d.uint())
		case 7:
			s.Missed = uint32(d.uint())
		default:
			d.skip()
		}
	})
	return s
}

func decodeConfirmInput(d *decoder) (in ConfirmInput) {
	d.fields(func(k uint64) {
		switch k {
		case 1:
			in.Due = make([]DueLease, d.length(majorArray))
			for i := range in.Due {
				in.Due[i] = decodeDue(d)
			}
		case 2:
			in.Stats = decodeConfirmStats(d)
		case 3:
			in.NowMs = d.int()
		case 4:
			in.Rand = d.uint()
		default:
			d.skip()
		}
	})
	return in
}

func decodeDue(d *decoder) (l DueLease) {
	d.fields(func(k uint64) {
		switch k {
		case 1:
			l.Cluster = d.text()
		case 2:
			l.Addr = d.text()
		case 3:
			l.Name = d.text()
		case 4:
			l.ID = d.int()
		case 5:
			l.Epoch = d.uint()
		case 6:
			l.LastHeartbeatMs = d.int()
		case 7:
			l.DeadlineMs = d.int()
		default:
			d.skip()
		}
	})
	return l
}

func decodeConfirmStats(d *decoder) (s ConfirmStats) {
	d.fields(func(k uint64) {
		switch k {
		case 1:
			s.Leases = uint32(d.uint())
		case 2:
			s.Due = uint32(d.uint())
		case 3:
			s.HeartbeatSuccessPermille = uint32(d.uint())
		default:
			d.skip()
		}
	})
	return s
}
