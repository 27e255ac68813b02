package wire

import (
	"reflect"
	"testing"
)

// TestOldClientsReadFreshAnswers decodes the freshness vectors as a client
// of the first version of the protocol would (Routes and RouteEvent with
// key 1 only): the unknown keys 2 and 3 are ignored and the results, route
// bytes and versions are those of the vectors without freshness.
func TestOldClientsReadFreshAnswers(t *testing.T) {
	type oldRoutes struct {
		Results []RouteResult `cbor:"1,keyasint"`
	}
	type oldEvent struct {
		Result RouteResult `cbor:"1,keyasint"`
	}
	byName := make(map[string][]byte)
	for _, lv := range loadVectors(t) {
		byName[lv.name] = lv.cbor
	}
	var fresh, plain oldRoutes
	if err := Unmarshal(byName["routes-fresh"], &fresh); err != nil {
		t.Fatal(err)
	}
	if err := Unmarshal(byName["routes"], &plain); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fresh, plain) {
		t.Errorf("an old client reads routes-fresh as\n%+v\nand routes as\n%+v", fresh, plain)
	}
	var ev, evPlain oldEvent
	if err := Unmarshal(byName["route-event-fresh"], &ev); err != nil {
		t.Fatal(err)
	}
	if err := Unmarshal(byName["route-event"], &evPlain); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ev, evPlain) || ev.Result.Version != RouteVersion(ev.Result.Route) {
		t.Errorf("an old client reads route-event-fresh as %+v, route-event as %+v", ev, evPlain)
	}
}
