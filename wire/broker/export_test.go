package broker

// SetTestHookStateChange sets testHookStateChange for one test and returns
// what undoes it.
func SetTestHookStateChange(f func(NodeState)) (undo func()) {
	testHookStateChange = f
	return func() { testHookStateChange = nil }
}
